#!/usr/bin/python3
"""MongoDB wire-protocol test server built on mockupdb + mongomock.

A local stand-in for a standalone mongod 6.0 that stays close to mongod's
behaviour. It exists only so that tests and benchmarks can run the official
`mongodb` Node driver over a real socket on machines where mongod cannot be
installed. Never use it for anything else.

    /usr/bin/python3 test/support/mongo-wire-server.py --port 0 [--ttl-interval-ms 1000]

Once it accepts connections it prints exactly one line, `LISTENING <port>`, on
stdout. It runs until SIGTERM/SIGINT, or with --exit-on-stdin-eof until its
stdin closes (so it cannot outlive the process that started it).

How it works
  * mockupdb parses the wire protocol (OP_MSG, plus the legacy OP_QUERY
    handshake) and frames replies. MockupDB's per-connection loop is replaced
    so that connections do not queue on mockupdb's lock while they wait for
    their sockets.
  * One shared in-memory mongomock client stores the data and provides the
    query, update, projection and aggregation engines. mongomock is not
    thread-safe, so every command runs under one global lock (STATE).
  * On top of mongomock this file adds what the driver and our repositories
    rely on:
      - mongod's reply shapes and error codes;
      - real server-side cursors (getMore, batchSize, a first batch of 101,
        replies of at most 16 MB);
      - unique indexes kept as hash maps that raise mongod's E11000 errors
        with keyPattern and keyValue;
      - a background TTL monitor;
      - O(1) look-ups by _id and by equality on a unique index;
      - per-document atomic updates;
      - inserted documents returned with the client's exact BSON bytes;
      - sessions, with lsid accepted and ignored, so explicit driver sessions
        work as they do on a standalone server.

Known gaps (app code must avoid these, or test them against a real mongod):
  * No transactions (code 20) and no change streams (code 40573), the same
    answers a standalone mongod gives. No auth, TLS, wire compression,
    capped or time-series collections, views, validators, collations,
    update pipelines or arrayFilters (code 115 CommandNotSupported).
  * Queries, updates and deletes scan the whole collection unless the filter
    is an equality on _id, or an equality on every field of a non-partial
    unique index. Non-unique indexes are metadata only. `hint` is ignored and
    there is no `explain`. Text, geo and hashed indexes can be created, but
    $text, $near and similar operators fail.
  * Query, update, projection and aggregation semantics are mongomock 4.1's.
    Stages: $match $group $sort $skip $limit $project $addFields/$set $unset
    $unwind $count $facet $lookup $replaceRoot/$replaceWith $sortByCount
    $bucket $sample $out. Not supported: $merge, window functions, find
    projections with aggregation expressions, or positional updates other
    than `$`. $group's $addToSet turns falsy values into null. $out
    recreates its target collection without indexes.
  * A multi-document update that fails on one document reports n=0 for that
    statement, although the documents before the failure stay updated.
  * A cursor encodes one document ahead. A change to that document made
    between two getMores is not seen.
  * Dates must fall within years 1-9999 (Python datetime). Field names are
    not validated on insert. getLastError is answered although mongod 6
    removed it.
"""

import argparse
import contextlib
import copy
import datetime
import errno
import itertools
import json
import os
import random
import re
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import types
import uuid

import bson
from bson import Int64, ObjectId
from bson.binary import Binary, UuidRepresentation
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from bson.regex import Regex
import mockupdb
from mockupdb import OpMsg, OpMsgReply, OpQuery, OpReply, OP_MSG_FLAGS, REPLY_FLAGS
import mongomock
import mongomock.store
from mongomock import aggregate as mm_aggregate
from mongomock import filtering, helpers
from mongomock.collection import Collection, _copy_field
from mongomock.filtering import filter_applies
from pymongo.errors import DuplicateKeyError, OperationFailure, PyMongoError

# ---------------------------------------------------------------------------
# Constants and shared state
# ---------------------------------------------------------------------------

SERVER_VERSION = '6.0.0'
MAX_WIRE_VERSION = 17
MAX_BSON_OBJECT_SIZE = 16 * 1024 * 1024
MAX_MESSAGE_SIZE = 48000000
MAX_WRITE_BATCH_SIZE = 100000
# Room left for the reply envelope so that a whole reply stays below 16 MB.
MAX_BATCH_BYTES = MAX_BSON_OBJECT_SIZE - 64 * 1024
DEFAULT_FIRST_BATCH = 101
CURSOR_IDLE_TIMEOUT_S = 600          # mongod's cursorTimeoutMillis default
SESSION_TIMEOUT_MINUTES = 30
TTL_CHUNK = 5000                     # docs the TTL monitor examines per lock hold

STATE = threading.RLock()            # serializes every touch of mongomock state
CLIENT = None                        # the shared mongomock.MongoClient
CURSORS = {}                         # cursor id -> ServerCursor
COLLECTIONS = {}                     # (db, name) -> mongomock Collection (stateless handle)
VERBOSE = False
STARTED = time.time()
CONNECTIONS = {'current': 0, 'total': 0}

CODE_NAMES = {
    2: 'BadValue', 9: 'FailedToParse', 13: 'Unauthorized', 14: 'TypeMismatch',
    20: 'IllegalOperation', 26: 'NamespaceNotFound', 27: 'IndexNotFound',
    43: 'CursorNotFound', 48: 'NamespaceExists', 53: 'InvalidIdField',
    59: 'CommandNotFound', 66: 'ImmutableField', 67: 'CannotCreateIndex',
    72: 'InvalidOptions', 73: 'InvalidNamespace', 85: 'IndexOptionsConflict',
    86: 'IndexKeySpecsConflict', 115: 'CommandNotSupported', 11000: 'DuplicateKey',
}

# Decode requests into plain dicts (ordered in Python 3.7+; faster and smaller
# than OrderedDict) and keep UUID binaries as Binary so they round-trip unchanged.
mockupdb.CODEC_OPTIONS = CodecOptions(document_class=dict,
                                      uuid_representation=UuidRepresentation.UNSPECIFIED)


class _NoLock(object):
    """Stand-in for mongomock's per-collection RWLock. STATE already serializes
    everything, and the real RWLock deadlocks if a generator is left open."""
    _null = contextlib.nullcontext()

    def reader(self):
        return self._null

    def writer(self):
        return self._null


mongomock.store.RWLock = _NoLock
# Plain dicts keep insertion order too, and iterating their values does not
# re-hash every key as the C OrderedDict does (ObjectId.__hash__ is Python code).
mongomock.store.collections = types.SimpleNamespace(OrderedDict=dict)
# mongomock would expire TTL documents lazily on every read (a full scan per
# access). Here the background monitor does it, as mongod does.
mongomock.store.CollectionStore._remove_expired_documents = lambda self: None


class CommandError(Exception):
    """A command failure reported as {ok: 0, code, codeName, errmsg, ...}."""

    def __init__(self, code, errmsg, **extra):
        super(CommandError, self).__init__(errmsg)
        self.code = code
        self.errmsg = errmsg
        self.extra = extra


def unsupported(what):
    return CommandError(115, 'mongo-wire-server (test stand-in for mongod) does not support %s' % what)


def log(msg):
    sys.stderr.write('[mongo-wire-server] %s\n' % msg)
    sys.stderr.flush()


# ---------------------------------------------------------------------------
# Value helpers: paths, hash keys, BSON ordering, mongod-style printing
# ---------------------------------------------------------------------------

MISSING = object()     # field absent (indexed as null)
UNDEFINED = object()   # empty array (indexed as undefined)
_END = object()


def store_key(_id):
    """Key of a document inside mongomock's CollectionStore."""
    return helpers.hashdict(_id) if isinstance(_id, dict) else _id


def path_values(value, parts, i=0):
    """All values reachable through a dotted path, with arrays expanded the way
    mongod's index keys and sort keys expand them."""
    if i == len(parts):
        if isinstance(value, list):
            return list(value) if value else [UNDEFINED]
        return [value]
    if isinstance(value, dict):
        if parts[i] in value:
            return path_values(value[parts[i]], parts, i + 1)
        return [MISSING]
    if isinstance(value, list):
        out = []
        part = parts[i]
        if part.isdigit() and int(part) < len(value):
            out.extend(path_values(value[int(part)], parts, i + 1))
        for element in value:
            if isinstance(element, dict):
                out.extend(path_values(element, parts, i))
        return out or [MISSING]
    return [MISSING]


# Types whose Python hash and equality already match mongod's index equality.
_SCALARS = frozenset([str, int, Int64, ObjectId, datetime.datetime])


def hkey(v):
    """Hashable key with mongod's equality: 1 == 1.0 == Long(1), but true != 1."""
    if v.__class__ in _SCALARS:
        return v
    if v is MISSING or v is None:
        return None
    if v is UNDEFINED:
        return ('$undefined',)
    if isinstance(v, bool):
        return ('$bool', v)
    if isinstance(v, dict):
        return ('$doc', tuple((k, hkey(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ('$arr', tuple(hkey(x) for x in v))
    if isinstance(v, float) and v != v:
        return ('$nan',)
    if isinstance(v, (Regex, re.Pattern)):
        return ('$regex', getattr(v, 'pattern', ''), getattr(v, 'flags', 0))
    try:
        hash(v)
        return v
    except TypeError:
        return ('$repr', type(v).__name__, repr(v))


def _binary_sort(v):
    subtype = getattr(v, 'subtype', 0)
    return (len(v), subtype, bytes(v))


def bson_sort_key(v):
    """(type rank, comparable) following mongod's BSON comparison order."""
    if v is MISSING or v is None:
        return (1, 0)
    if v is UNDEFINED:
        return (0, 1)
    if isinstance(v, bool):
        return (8, v)
    if isinstance(v, (int, float)):
        return (2, float('-inf') if v != v else v)
    if isinstance(v, str):
        return (3, v)
    if isinstance(v, dict):
        return (4, filtering.BsonComparable(v))
    if isinstance(v, list):
        return (5, filtering.BsonComparable(v))
    if isinstance(v, bytes):
        return (6, _binary_sort(v))
    if isinstance(v, ObjectId):
        return (7, v)
    if isinstance(v, datetime.datetime):
        return (9, v)
    if isinstance(v, bson.timestamp.Timestamp):
        return (10, (v.time, v.inc))
    if isinstance(v, (Regex, re.Pattern)):
        return (11, (v.pattern, str(v.flags)))
    if isinstance(v, bson.min_key.MinKey):
        return (-1, 0)
    if isinstance(v, bson.max_key.MaxKey):
        return (99, 0)
    if isinstance(v, bson.decimal128.Decimal128):
        return (2, float(v.to_decimal()))
    return (50, filtering.BsonComparable(v))


def sort_docs(docs, sort):
    """Stable multi-key sort like mongod's (arrays: min ascending, max descending)."""
    if not isinstance(sort, dict):
        raise CommandError(2, 'sort must be an object')
    for field, direction in reversed(list(sort.items())):
        if isinstance(direction, dict):
            raise unsupported('$meta sort')
        if field == '$natural':
            if direction < 0:
                docs.reverse()
            continue
        descending = direction < 0
        parts = field.split('.')
        pick = max if descending else min

        def key(doc, parts=parts, pick=pick):
            keys = [bson_sort_key(v) for v in path_values(doc, parts)]
            return keys[0] if len(keys) == 1 else pick(keys)

        docs.sort(key=key, reverse=descending)
    return docs


def to_millis(dt):
    delta = dt - datetime.datetime(1970, 1, 1, tzinfo=dt.tzinfo)
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def bson_repr(v):
    """Print a value the way mongod prints it in error messages."""
    if v is None or v is MISSING:
        return 'null'
    if v is UNDEFINED:
        return 'undefined'
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        if v != v:
            return 'nan.0'
        if v.is_integer() and abs(v) < 1e16:
            return '%.1f' % v
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, ObjectId):
        return "ObjectId('%s')" % v
    if isinstance(v, datetime.datetime):
        return 'new Date(%d)' % to_millis(v)
    if isinstance(v, dict):
        return '{ %s }' % ', '.join('%s: %s' % (k, bson_repr(x)) for k, x in v.items()) if v else '{}'
    if isinstance(v, list):
        return '[ %s ]' % ', '.join(bson_repr(x) for x in v) if v else '[]'
    if isinstance(v, bytes):
        return 'BinData(%d, %s)' % (getattr(v, 'subtype', 0), bytes(v).hex().upper())
    return str(v)


def public_value(v):
    return None if v is MISSING else ([] if v is UNDEFINED else v)


# ---------------------------------------------------------------------------
# Unique indexes (hash maps with mongod's E11000 errors)
# ---------------------------------------------------------------------------

ID_KEY_PATTERN = {'_id': 1}


def duplicate_key_error(ns, index_name, key_pattern, values):
    key_value = {field: public_value(v) for field, v in zip(key_pattern, values)}
    errmsg = 'E11000 duplicate key error collection: %s index: %s dup key: %s' % (
        ns, index_name, bson_repr(key_value))
    return DuplicateKeyError(errmsg, 11000, {
        'keyPattern': dict(key_pattern), 'keyValue': key_value, 'errmsg': errmsg})


class UniqueIndex(object):
    """Hash map from index key to the store key of the document holding it.

    mongomock updates documents in place, so an entry can go stale when a
    document's indexed value changes. Entries are checked against the live
    document whenever they are consulted. Every live document's current key
    is always registered, because a document registers its keys whenever
    they change (through _ensure_uniques) and a key cannot be taken over
    while its live holder still has it.
    """

    def __init__(self, name, key_pattern, sparse, partial):
        self.name = name
        self.key_pattern = key_pattern            # dict field -> direction
        self.paths = [f.split('.') for f in key_pattern]
        self.sparse = sparse
        self.partial = partial
        self.entries = {}
        # Most unique indexes are on one top-level field: keys() has a fast path.
        self.field = next(iter(key_pattern)) if len(key_pattern) == 1 and '.' not in next(iter(key_pattern)) else None

    def keys(self, doc):
        """[(hashable key, values)] that doc contributes; [] if not indexed."""
        if self.partial is not None and not filter_applies(self.partial, doc):
            return []
        if self.field is not None:
            v = doc.get(self.field, MISSING)
            if v.__class__ in _SCALARS:
                return [((v,), (v,))]
        per_field = [path_values(doc, parts) for parts in self.paths]
        if self.sparse and all(vals == [MISSING] for vals in per_field):
            return []
        if len(per_field) == 1:
            return [((hkey(v),), (v,)) for v in per_field[0]]
        return [(tuple(hkey(v) for v in combo), combo) for combo in itertools.product(*per_field)]

    def holder(self, store, key, sid):
        """Store key of another live document holding `key`, else _END."""
        other = self.entries.get(key, _END)
        if other is _END or other == sid:
            return _END
        other_doc = store._documents.get(other)
        if other_doc is not None and any(k == key for k, _ in self.keys(other_doc)):
            return other
        return _END


def unique_indexes(store):
    return [meta['_unique'] for meta in store.indexes.values() if '_unique' in meta]


def check_unique(store, ns, doc, sid, uniques=None):
    """Raise E11000 if doc collides on a unique index, else register its keys."""
    pending = []
    for index in unique_indexes(store) if uniques is None else uniques:
        for key, values in index.keys(doc):
            if index.holder(store, key, sid) is not _END:
                raise duplicate_key_error(ns, index.name, index.key_pattern, values)
            pending.append((index, key))
    for index, key in pending:
        index.entries[key] = sid


def unindex(store, doc, sid):
    for index in unique_indexes(store):
        for key, _ in index.keys(doc):
            if index.entries.get(key, _END) == sid:
                del index.entries[key]


def remove_doc(store, sid):
    doc = store._documents.pop(sid, None)
    if doc is not None:
        unindex(store, doc, sid)
        raw_cache(store).pop(sid, None)
    return doc


# ---------------------------------------------------------------------------
# Raw BSON cache and update bookkeeping.
#
# Documents are returned with the exact bytes the client inserted, as mongod
# does, so they need no re-encoding. An entry is (document object, bytes) and
# is used only while that very object is still the stored document. mongomock
# updates documents in place, so every document an update touches is
# invalidated as mongomock's update iterates it (_mm_iter_documents wraps
# the iterator in _tracking_update).
# ---------------------------------------------------------------------------

class _Update(object):
    store = None        # collection store a mongomock update is running on
    current = None      # (store key, snapshot) of the document being updated


def raw_cache(store):
    cache = store.__dict__.get('_wire_raw')
    if cache is None:
        cache = store.__dict__['_wire_raw'] = {}
    return cache


@contextlib.contextmanager
def updating(store):
    """Run a mongomock update on store. If it fails partway through a
    document (e.g. $inc on a string after a $set), restore that document:
    mongod applies each document's update atomically. Documents finished
    before the failure stay updated, as on mongod."""
    _Update.store, _Update.current = store, None
    try:
        yield
    except Exception:
        if _Update.current is not None:
            sid, snapshot = _Update.current
            if sid in store._documents:
                store._documents[sid] = snapshot
        raise
    finally:
        _Update.store = _Update.current = None


def _tracking_update(docs, store):
    cache = raw_cache(store)
    for doc in docs:
        sid = store_key(doc['_id'])
        cache.pop(sid, None)
        _Update.current = (sid, copy.deepcopy(doc))
        yield doc
        _Update.current = None           # mongomock finished this document


_orig_store_drop = mongomock.store.CollectionStore.drop


def _store_drop(self):
    _orig_store_drop(self)
    raw_cache(self).clear()


mongomock.store.CollectionStore.drop = _store_drop


def raw_document_sequence(body, identifier):
    """Raw bytes of each document in an OP_MSG kind-1 section, or None."""
    pos, end = 4, len(body)
    if struct.unpack_from('<I', body)[0] & OP_MSG_FLAGS['checksumPresent']:
        end -= 4
    while pos < end:
        kind = body[pos]
        size = struct.unpack_from('<i', body, pos + 1)[0]
        if kind == 1:
            nul = body.index(b'\x00', pos + 5)
            if body[pos + 5:nul] == identifier:
                docs, p, section_end = [], nul + 1, pos + 1 + size
                while p < section_end:
                    n = struct.unpack_from('<i', body, p)[0]
                    docs.append(body[p:p + n])
                    p += n
                return docs
        pos += 1 + size
    return None


def _plain_equality(v):
    if isinstance(v, dict) and len(v) == 1 and '$eq' in v:
        v = v['$eq']
    if v is None or isinstance(v, (dict, list, Regex, re.Pattern)):
        return _END
    return v


def candidate_ids(store, spec):
    """Store keys that can match spec, or None when a full scan is needed."""
    if not isinstance(spec, dict) or not spec:
        return None
    if '_id' in spec:
        v = spec['_id']
        if isinstance(v, dict) and len(v) == 1 and '$in' in v and isinstance(v['$in'], list):
            values = v['$in']
        elif isinstance(v, dict) and any(k.startswith('$') for k in v):
            values = [v['$eq']] if list(v) == ['$eq'] else None
        else:
            values = [v]
        if values is not None:
            ids, seen = [], set()
            for x in values:
                if isinstance(x, (list, Regex, re.Pattern)):
                    return None
                x = store_key(x)
                try:
                    if x in seen:
                        continue           # {$in: [1, 1]} matches the document once
                    seen.add(x)
                except TypeError:
                    return None
                ids.append(x)
            return ids
    for index in unique_indexes(store):
        if index.partial is not None:
            continue
        values = [_plain_equality(spec[f]) if f in spec else _END for f in index.key_pattern]
        if any(v is _END for v in values):
            continue
        sid = index.entries.get(tuple(hkey(v) for v in values), _END)
        return [] if sid is _END else [sid]
    return None


# mongomock hooks: its update/upsert paths call these two methods.

def _mm_iter_documents(self, spec):
    store = self._store
    docs = store._documents
    ids = candidate_ids(store, spec)
    if ids is not None:
        found = []
        for sid in ids:
            doc = docs.get(sid)
            if doc is not None and filter_applies(spec, doc):
                found.append(doc)
        it = iter(found)
    else:
        if not spec:
            it = iter(list(docs.values()))
        else:
            if not docs:
                filter_applies(spec, {})   # still reject invalid filters
            it = (doc for doc in list(docs.values()) if filter_applies(spec, doc))
    return _tracking_update(it, store) if _Update.store is store else it


_orig_mm_insert = Collection._insert


def _mm_insert(self, data, session=None, ordered=True):
    # An upsert whose _id is taken: report it like mongod, not mongomock.
    if isinstance(data, dict) and '_id' in data and store_key(data['_id']) in self._store._documents:
        raise duplicate_key_error(self.full_name, '_id_', ID_KEY_PATTERN, (data['_id'],))
    return _orig_mm_insert(self, data, session, ordered)


def _mm_ensure_uniques(self, new_data):
    sid = store_key(new_data['_id'])
    raw_cache(self._store).pop(sid, None)
    check_unique(self._store, self.full_name, new_data, sid)


Collection._iter_documents = _mm_iter_documents
Collection._insert = _mm_insert
Collection._ensure_uniques = _mm_ensure_uniques


# ---------------------------------------------------------------------------
# Aggregation stage fixes (mongod semantics where mongomock differs)
# ---------------------------------------------------------------------------

_H = mm_aggregate._PIPELINE_HANDLERS
_orig_group, _orig_count = _H['$group'], _H['$count']


def _stage_group(docs, database, options):
    if not docs:                       # mongod emits nothing for empty input
        return []
    out = []
    for doc in _orig_group(docs, database, options):
        ordered = {'_id': doc.get('_id')}
        ordered.update((k, v) for k, v in doc.items() if k != '_id')
        out.append(ordered)
    return out


def _stage_count(docs, database, options):
    return _orig_count(docs, database, options) if docs else []


def _stage_sort(docs, database, options):
    return sort_docs(list(docs), options)


def _stage_unset(docs, database, options):
    fields = [options] if isinstance(options, str) else list(options)
    return _H['$project'](docs, database, {f: 0 for f in fields})


def _stage_replace_with(docs, database, options):
    return _H['$replaceRoot'](docs, database, {'newRoot': options})


def _stage_sort_by_count(docs, database, options):
    grouped = _stage_group(docs, database, {'_id': options, 'count': {'$sum': 1}})
    return sort_docs(grouped, {'count': -1})


_H.update({'$group': _stage_group, '$count': _stage_count, '$sort': _stage_sort,
           '$unset': _stage_unset, '$replaceWith': _stage_replace_with,
           '$sortByCount': _stage_sort_by_count})

# Stages that never mutate their input documents: a pipeline made only of
# these can run on the stored documents without copying them first.
READ_ONLY_STAGES = {'$match', '$sort', '$skip', '$limit', '$count', '$group', '$project',
                    '$sortByCount'}


# ---------------------------------------------------------------------------
# Cursors
# ---------------------------------------------------------------------------

class ServerCursor(object):
    """Results kept on the server between find/aggregate and getMore."""

    def __init__(self, ns, source, project=None, store=None):
        self.id = 0
        self.ns = ns
        self.source = source            # iterator of documents
        self.project = project          # optional projection, applied on encode
        self.store = store              # live collection: skip docs deleted since
        self.pending = None             # encoded doc that did not fit the last batch
        self.exhausted = False
        self.touched = time.monotonic()
        self._raws = None

    def _raw_docs(self):
        """Yield each remaining result as BSON bytes."""
        encode, project, store = bson.encode, self.project, self.store
        if store is None:
            for doc in self.source:
                yield encode(project(doc) if project else doc)
            return
        docs, cache, hashdict = store._documents, raw_cache(store), helpers.hashdict
        for doc in self.source:
            sid = doc['_id']
            if sid.__class__ is dict:
                sid = hashdict(sid)
            doc = docs.get(sid)
            if doc is None:
                continue                   # deleted since the query ran
            if project:
                yield encode(project(doc))
                continue
            entry = cache.get(sid)
            yield entry[1] if entry is not None and entry[0] is doc else encode(doc)

    def next_batch(self, batch_size):
        """Up to batch_size docs (None: no count limit) and at most
        MAX_BATCH_BYTES, as a list of BSON bytes. Sets self.exhausted."""
        self.touched = time.monotonic()
        if self._raws is None:
            self._raws = self._raw_docs()
        out, size = [], 0
        if self.pending is not None:
            out.append(self.pending)
            size = len(self.pending)
            self.pending = None
        limit = batch_size if batch_size is not None else float('inf')
        if len(out) < limit:
            for raw in self._raws:
                if out and size + len(raw) > MAX_BATCH_BYTES:
                    self.pending = raw
                    break
                out.append(raw)
                size += len(raw)
                if len(out) >= limit:
                    break
        if self.pending is None:
            # Look one document ahead so that the last batch closes the cursor.
            self.pending = next(self._raws, None)
        self.exhausted = self.pending is None
        return out


_ARRAY_KEYS = []


def _array_keys(n):
    while len(_ARRAY_KEYS) < n:
        _ARRAY_KEYS.append(b'\x03' + str(len(_ARRAY_KEYS)).encode() + b'\x00')
    return _ARRAY_KEYS


def cursor_document(batch_name, raws, cursor_id, ns):
    """{<batch_name>: [...], id, ns} as raw BSON, assembled from already
    encoded documents instead of re-encoding them."""
    keys = _array_keys(len(raws))
    array = b''.join(itertools.chain.from_iterable(zip(keys, raws)))
    ns_bytes = ns.encode()
    body = b''.join([
        b'\x04', batch_name, b'\x00', struct.pack('<i', len(array) + 5), array, b'\x00',
        b'\x12id\x00', struct.pack('<q', cursor_id),
        b'\x02ns\x00', struct.pack('<i', len(ns_bytes) + 1), ns_bytes, b'\x00'])
    return RawBSONDocument(struct.pack('<i', len(body) + 5) + body + b'\x00')


def cursor_reply(cursor, batch_size, single_batch=False):
    """First reply of a cursor-returning command."""
    if batch_size is not None:
        batch_size = int(batch_size)
        if batch_size < 0:
            raise CommandError(2, 'BatchSize value must be non-negative, but received: %d' % batch_size)
    else:
        batch_size = DEFAULT_FIRST_BATCH
    batch = cursor.next_batch(batch_size) if batch_size else []
    cursor_id = 0
    if batch_size and (cursor.exhausted or single_batch):
        pass
    else:
        cursor_id = random.getrandbits(62) + 1
        while cursor_id in CURSORS:
            cursor_id = random.getrandbits(62) + 1
        cursor.id = cursor_id
        CURSORS[cursor_id] = cursor
    return {'cursor': cursor_document(b'firstBatch', batch, cursor_id, cursor.ns), 'ok': 1.0}


def kill_cursors_for(ns_prefix):
    for cid in [cid for cid, c in CURSORS.items()
                if c.ns == ns_prefix or c.ns.startswith(ns_prefix + '.')]:
        del CURSORS[cid]


# ---------------------------------------------------------------------------
# Command helpers
# ---------------------------------------------------------------------------

def get_coll(db, name):
    if not isinstance(name, str) or not name or '$' in name or '\x00' in name or name[0] == '.':
        raise CommandError(73, "Invalid namespace specified '%s.%s'" % (db, name))
    key = (db, name)
    coll = COLLECTIONS.get(key)
    if coll is None:
        coll = COLLECTIONS[key] = CLIENT[db][name]
    return coll


def check_collation(cmd):
    if cmd.get('collation'):
        raise unsupported('collation')


def projector(coll, projection):
    if not projection:
        return None
    if not isinstance(projection, dict):
        raise CommandError(2, 'projection must be an object')
    return lambda doc: coll._copy_only_fields(doc, dict(projection), dict)


def query_docs(coll, spec, sort=None, skip=0, limit=0):
    if not isinstance(spec, dict):
        raise CommandError(14, "BSON field 'filter' is the wrong type, expected type 'object'")
    it = coll._iter_documents(spec)
    if sort:
        it = iter(sort_docs(list(it), sort))
    if skip or limit:
        it = itertools.islice(it, skip, skip + limit if limit else None)
    return it


def int_arg(cmd, name, default=0):
    v = cmd.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CommandError(14, "BSON field '%s' is the wrong type" % name)
    return int(v)


def error_fields(exc, ns=None):
    """(code, errmsg, extra) for an exception raised while running a command."""
    if isinstance(exc, CommandError):
        return exc.code, exc.errmsg, exc.extra
    if isinstance(exc, DuplicateKeyError):
        details = exc.details or {}
        if 'keyPattern' in details:
            return 11000, details.get('errmsg') or str(exc), {
                'keyPattern': details['keyPattern'], 'keyValue': details['keyValue']}
        # mongomock's own _id check during an upsert.
        return 11000, 'E11000 duplicate key error collection: %s index: _id_' % ns, {
            'keyPattern': dict(ID_KEY_PATTERN)}
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, mongomock.InvalidName):
        return 73, msg, {}
    if "field '_id'" in msg or '_id field cannot be changed' in msg:
        return 66, msg, {}
    if isinstance(exc, OperationFailure) and exc.code:
        return exc.code, msg, {}
    if isinstance(exc, TypeError) and ('unsupported operand' in msg or 'concatenate' in msg):
        return 14, 'Cannot apply $inc to a value of non-numeric type (%s)' % msg, {}
    if isinstance(exc, NotImplementedError):
        return 2, 'not implemented by mongomock: %s' % msg, {}
    if not isinstance(exc, (PyMongoError, ValueError, TypeError, KeyError)):
        log('unexpected %s: %s\n%s' % (type(exc).__name__, msg, traceback.format_exc()))
    return 2, msg, {}


def write_error(index, exc, ns):
    code, errmsg, extra = error_fields(exc, ns)
    entry = {'index': index, 'code': code}
    entry.update(extra)
    entry['errmsg'] = errmsg
    return entry


def write_reply(reply, errors):
    if errors:
        reply['writeErrors'] = errors
    reply['ok'] = 1.0
    return reply


def id_first(store, _id):
    """mongod stores _id as the first field; mongomock's upsert appends it."""
    sid = store_key(_id)
    doc = store._documents.get(sid)
    if doc is not None and next(iter(doc)) != '_id':
        fixed = {'_id': doc['_id']}
        fixed.update((k, v) for k, v in doc.items() if k != '_id')
        store._documents[sid] = fixed


# ---------------------------------------------------------------------------
# Handshake, sessions and server info
# ---------------------------------------------------------------------------

def cmd_hello(db, cmd, conn):
    name = next(iter(cmd))
    reply = {}
    if cmd.get('helloOk'):
        reply['helloOk'] = True
    reply['isWritablePrimary' if name == 'hello' else 'ismaster'] = True
    reply.update({
        'maxBsonObjectSize': MAX_BSON_OBJECT_SIZE,
        'maxMessageSizeBytes': MAX_MESSAGE_SIZE,
        'maxWriteBatchSize': MAX_WRITE_BATCH_SIZE,
        'localTime': datetime.datetime.utcnow(),
        'logicalSessionTimeoutMinutes': SESSION_TIMEOUT_MINUTES,
        'connectionId': conn.id,
        'minWireVersion': 0,
        'maxWireVersion': MAX_WIRE_VERSION,
        'readOnly': False,
        'ok': 1.0,
    })
    return reply


def cmd_ping(db, cmd, conn):
    return {'ok': 1.0}


def cmd_build_info(db, cmd, conn):
    return {'version': SERVER_VERSION, 'gitVersion': 'mongo-wire-server',
            'versionArray': [int(x) for x in SERVER_VERSION.split('.')] + [0],
            'bits': 64, 'debug': False, 'maxBsonObjectSize': MAX_BSON_OBJECT_SIZE,
            'storageEngines': ['mongomock'], 'javascriptEngine': 'none', 'ok': 1.0}


def cmd_start_session(db, cmd, conn):
    return {'id': {'id': Binary(uuid.uuid4().bytes, 4)},
            'timeoutMinutes': SESSION_TIMEOUT_MINUTES, 'ok': 1.0}


def cmd_get_last_error(db, cmd, conn):
    return {'n': 0, 'err': None, 'ok': 1.0}


def cmd_whatsmyuri(db, cmd, conn):
    return {'you': conn.peer, 'ok': 1.0}


def cmd_server_status(db, cmd, conn):
    now = time.time()
    return {'host': socket.gethostname(), 'version': SERVER_VERSION, 'process': 'mongod',
            'pid': Int64(os.getpid()), 'uptime': float(int(now - STARTED)),
            'uptimeMillis': Int64(int((now - STARTED) * 1000)),
            'localTime': datetime.datetime.utcnow(),
            'connections': {'current': CONNECTIONS['current'], 'available': 1000000,
                            'totalCreated': CONNECTIONS['total']},
            'ok': 1.0}


def cmd_transaction(db, cmd, conn):
    raise CommandError(20, 'Transaction numbers are only allowed on a replica set member or mongos')


# ---------------------------------------------------------------------------
# Writes: insert, update, delete, findAndModify
# ---------------------------------------------------------------------------

def insert_one(ns, store, doc, raw, uniques, cache):
    """Store one document like mongod: _id generated and put first if absent,
    E11000 on the _id index or any unique index."""
    if '_id' not in doc:
        doc = dict(itertools.chain((('_id', ObjectId()),), doc.items()))
        raw = None                       # the client's bytes lack the new _id
    _id = doc['_id']
    if _id.__class__ is dict:
        sid = helpers.hashdict(_id)
    elif isinstance(_id, (list, Regex, re.Pattern)):
        raise CommandError(2, "can't use %s for _id" % ('an array' if isinstance(_id, list) else 'a regex'))
    else:
        sid = _id
    docs = store._documents
    if sid in docs:
        raise duplicate_key_error(ns, '_id_', ID_KEY_PATTERN, (_id,))
    docs[sid] = doc
    if uniques:
        try:
            check_unique(store, ns, doc, sid, uniques)
        except Exception:
            del docs[sid]
            raise
    if raw is not None:
        cache[sid] = (doc, raw)


def cmd_insert(db, cmd, conn):
    coll = get_coll(db, cmd['insert'])
    store, ns = coll._store, coll.full_name
    ordered = cmd.get('ordered', True)
    store.create()
    documents = cmd.get('documents') or []
    raws = conn.raw_documents
    if raws is None or len(raws) != len(documents):
        raws = itertools.repeat(None)
    uniques, cache = unique_indexes(store), raw_cache(store)
    n, errors = 0, []
    for i, (doc, raw) in enumerate(zip(documents, raws)):
        try:
            insert_one(ns, store, doc, raw, uniques, cache)
            n += 1
        except Exception as exc:
            errors.append(write_error(i, exc, ns))
            if ordered:
                break
    return write_reply({'n': n}, errors)


def check_update(u, spec):
    if isinstance(u, list):
        raise unsupported('update pipelines')
    if not isinstance(u, dict):
        raise CommandError(14, "BSON field 'u' is the wrong type, expected type 'object'")
    if spec.get('arrayFilters'):
        raise unsupported('arrayFilters')
    check_collation(spec)


def cmd_update(db, cmd, conn):
    coll = get_coll(db, cmd['update'])
    store = coll._store
    ordered = cmd.get('ordered', True)
    n = modified = 0
    upserted, errors = [], []
    for i, spec in enumerate(cmd.get('updates') or []):
        try:
            u = spec.get('u')
            check_update(u, spec)
            multi = bool(spec.get('multi'))
            if multi and u and not next(iter(u)).startswith('$'):
                raise CommandError(9, 'multi update is not supported for replacement-style update')
            with updating(store):
                res = coll._update(spec.get('q') or {}, u, upsert=bool(spec.get('upsert')), multi=multi)
            n += res['n']
            modified += res['nModified']
            if res['upserted'] is not None:
                store.create()
                id_first(store, res['upserted'])
                upserted.append({'index': i, '_id': res['upserted']})
        except Exception as exc:
            errors.append(write_error(i, exc, coll.full_name))
            if ordered:
                break
    reply = {'n': n, 'nModified': modified}
    if upserted:
        reply['upserted'] = upserted
    return write_reply(reply, errors)


def cmd_delete(db, cmd, conn):
    coll = get_coll(db, cmd['delete'])
    store = coll._store
    ordered = cmd.get('ordered', True)
    n, errors = 0, []
    for i, spec in enumerate(cmd.get('deletes') or []):
        try:
            check_collation(spec)
            it = query_docs(coll, spec.get('q') or {})
            if spec.get('limit'):
                it = itertools.islice(it, 1)
            victims = list(it)
            for doc in victims:
                remove_doc(store, store_key(doc['_id']))
            n += len(victims)
        except Exception as exc:
            errors.append(write_error(i, exc, coll.full_name))
            if ordered:
                break
    return write_reply({'n': n}, errors)


def cmd_find_and_modify(db, cmd, conn):
    coll = get_coll(db, next(iter(cmd.values())))
    store = coll._store
    query = cmd.get('query') or {}
    update, remove = cmd.get('update'), bool(cmd.get('remove'))
    new, upsert = bool(cmd.get('new')), bool(cmd.get('upsert'))
    if remove and update is not None:
        raise CommandError(9, 'Cannot specify both an update and remove=true')
    if not remove and update is None:
        raise CommandError(9, 'Either an update or remove=true must be specified')
    if remove and new:
        raise CommandError(9, "Cannot specify both new=true and remove=true; 'remove' always returns the deleted document")
    if remove and upsert:
        raise CommandError(9, 'Cannot specify both upsert=true and remove=true')
    if not remove:
        check_update(update, cmd)
    check_collation(cmd)
    project = projector(coll, cmd.get('fields')) or (lambda doc: doc)

    target = next(query_docs(coll, query, cmd.get('sort')), None)
    if remove:
        if target is None:
            return {'lastErrorObject': {'n': 0}, 'value': None, 'ok': 1.0}
        remove_doc(store, store_key(target['_id']))
        return {'lastErrorObject': {'n': 1}, 'value': project(target), 'ok': 1.0}
    if target is None:
        if not upsert:
            return {'lastErrorObject': {'n': 0, 'updatedExisting': False}, 'value': None, 'ok': 1.0}
        with updating(store):
            res = coll._update(query, update, upsert=True)
        store.create()
        id_first(store, res['upserted'])
        doc = store._documents.get(store_key(res['upserted']))
        return {'lastErrorObject': {'n': 1, 'updatedExisting': False, 'upserted': res['upserted']},
                'value': project(doc) if new else None, 'ok': 1.0}
    before = None if new else (project(target) if cmd.get('fields') else _copy_field(target, dict))
    spec = dict(query)
    spec['_id'] = target['_id']
    with updating(store):
        coll._update(spec, update, upsert=False, multi=False)
    after = store._documents.get(store_key(target['_id']))
    return {'lastErrorObject': {'n': 1, 'updatedExisting': True},
            'value': project(after) if new else before, 'ok': 1.0}


# ---------------------------------------------------------------------------
# Reads: find, getMore, killCursors, aggregate, count, distinct
# ---------------------------------------------------------------------------

def cmd_find(db, cmd, conn):
    coll = get_coll(db, cmd['find'])
    check_collation(cmd)
    if cmd.get('tailable') or cmd.get('awaitData'):
        raise CommandError(2, 'error processing query: tailable cursor requested on non capped collection')
    skip, limit = int_arg(cmd, 'skip'), abs(int_arg(cmd, 'limit'))
    if skip < 0:
        raise CommandError(2, 'skip value must be non-negative')
    source = query_docs(coll, cmd.get('filter') or {}, cmd.get('sort'), skip, limit)
    cursor = ServerCursor(coll.full_name, source, projector(coll, cmd.get('projection')), coll._store)
    return cursor_reply(cursor, cmd.get('batchSize'), bool(cmd.get('singleBatch')))


def cmd_get_more(db, cmd, conn):
    cursor_id = int(cmd['getMore'])
    ns = '%s.%s' % (db, cmd.get('collection'))
    cursor = CURSORS.get(cursor_id)
    if cursor is None:
        raise CommandError(43, 'cursor id %d not found' % cursor_id)
    if cursor.ns != ns:
        raise CommandError(13, "Requested getMore on namespace '%s', but cursor belongs to a "
                               "different namespace %s" % (ns, cursor.ns))
    batch_size = int_arg(cmd, 'batchSize') or None
    try:
        batch = cursor.next_batch(batch_size)
    except Exception:
        CURSORS.pop(cursor_id, None)
        raise
    if cursor.exhausted:
        CURSORS.pop(cursor_id, None)
        cursor_id = 0
    return {'cursor': cursor_document(b'nextBatch', batch, cursor_id, cursor.ns), 'ok': 1.0}


def cmd_kill_cursors(db, cmd, conn):
    killed, not_found = [], []
    for cid in cmd.get('cursors') or []:
        (killed if CURSORS.pop(int(cid), None) is not None else not_found).append(Int64(int(cid)))
    return {'cursorsKilled': killed, 'cursorsNotFound': not_found, 'cursorsAlive': [],
            'cursorsUnknown': [], 'ok': 1.0}


def cmd_aggregate(db, cmd, conn):
    target, pipeline = cmd['aggregate'], cmd.get('pipeline')
    if not isinstance(pipeline, list):
        raise CommandError(14, "'pipeline' option must be specified as an array")
    for stage in pipeline:
        if not isinstance(stage, dict) or len(stage) != 1:
            raise CommandError(40323, 'A pipeline stage specification object must contain exactly one field.')
        name = next(iter(stage))
        if name == '$changeStream':
            raise CommandError(40573, 'The $changeStream stage is only supported on replica sets')
        if name not in _H:
            raise CommandError(40324, "Unrecognized pipeline stage name: '%s'" % name)
        if _H[name] is None:
            raise unsupported('the %s aggregation stage' % name)
    if not isinstance(target, str):
        raise unsupported('collection-less aggregate')
    if cmd.get('explain'):
        raise unsupported('explain')
    check_collation(cmd)
    coll = get_coll(db, target)
    rest = pipeline
    if rest and '$match' in rest[0]:
        docs = list(query_docs(coll, rest[0]['$match']))
        rest = rest[1:]
    else:
        docs = list(coll._store._documents.values())
    if not all(next(iter(stage)) in READ_ONLY_STAGES for stage in rest):
        docs = [_copy_field(doc, dict) for doc in docs]
    result = list(mm_aggregate.process_pipeline(docs, coll.database, rest, None))
    if pipeline and '$out' in pipeline[-1]:
        result = []
    cursor = ServerCursor(coll.full_name, iter(result))
    return cursor_reply(cursor, (cmd.get('cursor') or {}).get('batchSize'))


def cmd_count(db, cmd, conn):
    coll = get_coll(db, cmd['count'])
    check_collation(cmd)
    query = cmd.get('query') or {}
    skip, limit = int_arg(cmd, 'skip'), abs(int_arg(cmd, 'limit'))
    if query:
        total = sum(1 for _ in query_docs(coll, query))
    else:
        total = len(coll._store._documents)
    n = max(0, total - skip)
    if limit:
        n = min(n, limit)
    return {'n': n, 'ok': 1.0}


def cmd_distinct(db, cmd, conn):
    coll = get_coll(db, cmd['distinct'])
    check_collation(cmd)
    key = cmd.get('key')
    if not isinstance(key, str) or not key:
        raise CommandError(14, "BSON field 'distinct.key' is the wrong type, expected type 'string'")
    parts = key.split('.')
    seen, values = set(), []
    for doc in query_docs(coll, cmd.get('query') or {}):
        for v in path_values(doc, parts):
            if v is MISSING or v is UNDEFINED:
                continue
            k = hkey(v)
            if k not in seen:
                seen.add(k)
                values.append(v)
    return {'values': values, 'ok': 1.0}


# ---------------------------------------------------------------------------
# Indexes: createIndexes, listIndexes, dropIndexes, collMod
# ---------------------------------------------------------------------------

ID_INDEX_SPEC = {'v': 2, 'key': {'_id': 1}, 'name': '_id_'}
INDEX_OPTION_FIELDS = ('unique', 'sparse', 'expireAfterSeconds', 'partialFilterExpression',
                       'collation', 'weights', 'default_language', 'language_override',
                       '2dsphereIndexVersion', 'bits', 'min', 'max', 'hidden', 'wildcardProjection')


def index_options(spec):
    opts = {k: spec[k] for k in INDEX_OPTION_FIELDS if k in spec}
    for flag in ('unique', 'sparse', 'hidden'):
        if not opts.get(flag):
            opts.pop(flag, None)
    return opts


def same_key(a, b):
    return list(a.items()) == list(b.items())


def create_one_index(coll, store, spec):
    key = spec.get('key')
    if not isinstance(key, dict) or not key:
        raise CommandError(67, 'Index keys cannot be empty.')
    for field, direction in key.items():
        if isinstance(direction, bool) or not (
                (isinstance(direction, (int, float)) and direction != 0)
                or direction in ('text', '2d', '2dsphere', 'hashed')):
            raise CommandError(67, 'Values in the index key pattern can only be numbers or strings')
    name = spec.get('name') or '_'.join('%s_%s' % (f, d) for f, d in key.items())
    public = {'v': 2, 'key': dict(key), 'name': name}
    public.update((k, v) for k, v in spec.items() if k not in ('v', 'key', 'name', 'ns', 'background'))
    options = index_options(spec)

    ttl = spec.get('expireAfterSeconds')
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl < 0 or ttl > 2147483647:
            raise CommandError(67, 'TTL index \'expireAfterSeconds\' option must be within an '
                                   'acceptable range, rejecting value: %r' % (ttl,))
        if len(key) != 1:
            raise CommandError(67, 'TTL indexes are single-field indexes, compound indexes do not support TTL.')
        if '_id' in key:
            raise CommandError(67, 'The field \'expireAfterSeconds\' is not valid for an _id index specification.')

    if same_key(key, ID_KEY_PATTERN):
        if name != '_id_' or options:
            raise CommandError(85, 'Index already exists with a different name: _id_')
        return False
    for existing_name, meta in store.indexes.items():
        existing = meta['spec']
        if existing_name == name:
            if not same_key(existing['key'], key):
                raise CommandError(86, 'An existing index has the same name as the requested index. '
                                       'Requested index: %s, existing index: %s'
                                       % (bson_repr(public), bson_repr(existing)))
            if index_options(existing) != options:
                raise CommandError(85, 'An equivalent index already exists with the same name but '
                                       'different options. Requested index: %s, existing index: %s'
                                       % (bson_repr(public), bson_repr(existing)))
            return False
        if (same_key(existing['key'], key)
                and existing.get('partialFilterExpression') == spec.get('partialFilterExpression')
                and existing.get('collation') == spec.get('collation')):
            raise CommandError(85, 'Index already exists with a different name: %s' % existing_name)

    meta = {'key': list(key.items()), 'spec': public}
    meta.update(options)
    if spec.get('unique'):
        index = UniqueIndex(name, dict(key), bool(spec.get('sparse')), spec.get('partialFilterExpression'))
        for sid, doc in store._documents.items():
            for k, values in index.keys(doc):
                if index.entries.get(k, sid) != sid:
                    err = duplicate_key_error(coll.full_name, name, key, values)
                    raise CommandError(11000, 'Index build failed: %s' % err.details['errmsg'],
                                       keyPattern=dict(key), keyValue=err.details['keyValue'])
                index.entries[k] = sid
        meta['_unique'] = index
    store.indexes[name] = meta
    return True


def cmd_create_indexes(db, cmd, conn):
    coll = get_coll(db, cmd['createIndexes'])
    store = coll._store
    specs = cmd.get('indexes')
    if not isinstance(specs, list) or not specs:
        raise CommandError(2, 'Must specify at least one index to create')
    created_automatically = not store.is_created
    before = 1 + len(store.indexes)
    store.create()
    saved = dict(store.indexes)
    try:
        created = [create_one_index(coll, store, spec) for spec in specs]
    except Exception:
        store.indexes = saved          # all or nothing, like mongod
        raise
    reply = {'numIndexesBefore': before, 'numIndexesAfter': 1 + len(store.indexes),
             'createdCollectionAutomatically': bool(created_automatically)}
    if not any(created):
        reply['note'] = 'all indexes already exist'
    reply['ok'] = 1.0
    return reply


def cmd_list_indexes(db, cmd, conn):
    coll = get_coll(db, cmd['listIndexes'])
    store = coll._store
    if not store.is_created:
        raise CommandError(26, 'ns does not exist: %s' % coll.full_name)
    specs = [dict(ID_INDEX_SPEC)] + [dict(meta['spec']) for meta in store.indexes.values()]
    cursor = ServerCursor(coll.full_name, iter(specs))
    return cursor_reply(cursor, (cmd.get('cursor') or {}).get('batchSize'))


def cmd_drop_indexes(db, cmd, conn):
    coll = get_coll(db, next(iter(cmd.values())))
    store = coll._store
    if not store.is_created:
        raise CommandError(26, 'ns not found %s' % coll.full_name)
    was = 1 + len(store.indexes)
    target = cmd.get('index')
    if target == '*':
        names = list(store.indexes)
    elif isinstance(target, dict):
        if same_key(target, ID_KEY_PATTERN):
            raise CommandError(72, 'cannot drop _id index')
        names = [n for n, meta in store.indexes.items() if same_key(meta['spec']['key'], target)]
        if not names:
            raise CommandError(27, "can't find index with key: %s" % bson_repr(target))
    else:
        names = target if isinstance(target, list) else [target]
        for name in names:
            if name == '_id_':
                raise CommandError(72, 'cannot drop _id index')
            if name not in store.indexes:
                raise CommandError(27, 'index not found with name [%s]' % name)
    for name in names:
        del store.indexes[name]
    return {'nIndexesWas': was, 'ok': 1.0}


def cmd_coll_mod(db, cmd, conn):
    coll = get_coll(db, cmd['collMod'])
    store = coll._store
    if not store.is_created:
        raise CommandError(26, 'ns does not exist')
    other = [k for k in cmd if k not in ('collMod', 'index') and k not in GENERIC_ARGUMENTS]
    if other:
        raise unsupported('collMod option(s) %s' % ', '.join(other))
    reply = {}
    change = cmd.get('index')
    if change:
        matches = [meta for n, meta in store.indexes.items()
                   if n == change.get('name') or ('keyPattern' in change
                                                  and same_key(meta['spec']['key'], change['keyPattern']))]
        if not matches:
            raise CommandError(27, 'cannot find index %s for ns %s' % (bson_repr(change), coll.full_name))
        meta = matches[0]
        if 'expireAfterSeconds' in change:
            if meta.get('expireAfterSeconds') is None:
                raise CommandError(72, 'no expireAfterSeconds field to update')
            reply['expireAfterSeconds_old'] = meta['expireAfterSeconds']
            reply['expireAfterSeconds_new'] = change['expireAfterSeconds']
            meta['expireAfterSeconds'] = change['expireAfterSeconds']
            meta['spec']['expireAfterSeconds'] = change['expireAfterSeconds']
        if 'hidden' in change:
            reply['hidden_old'] = bool(meta['spec'].get('hidden'))
            reply['hidden_new'] = bool(change['hidden'])
            meta['spec']['hidden'] = bool(change['hidden'])
    reply['ok'] = 1.0
    return reply


# ---------------------------------------------------------------------------
# Catalog: create, drop, listCollections, renameCollection, databases
# ---------------------------------------------------------------------------

UNSUPPORTED_COLLECTION_OPTIONS = ('capped', 'timeseries', 'validator', 'viewOn', 'pipeline',
                                  'clusteredIndex', 'changeStreamPreAndPostImages',
                                  'encryptedFields', 'collation', 'expireAfterSeconds')


def cmd_create(db, cmd, conn):
    coll = get_coll(db, cmd['create'])
    bad = [k for k in UNSUPPORTED_COLLECTION_OPTIONS if cmd.get(k)]
    if bad:
        raise unsupported('collection option(s) %s' % ', '.join(bad))
    store = coll._store
    if store.is_created:
        raise CommandError(48, 'Collection %s already exists.' % coll.full_name)
    store.create()
    return {'ok': 1.0}


def cmd_drop(db, cmd, conn):
    coll = get_coll(db, cmd['drop'])
    store = coll._store
    if not store.is_created:
        raise CommandError(26, 'ns not found')
    was = 1 + len(store.indexes)
    store.drop()
    kill_cursors_for(coll.full_name)
    return {'nIndexesWas': was, 'ns': coll.full_name, 'ok': 1.0}


def collection_uuid(store):
    if not hasattr(store, '_wire_uuid'):
        store._wire_uuid = Binary(uuid.uuid4().bytes, 4)
    return store._wire_uuid


def cmd_list_collections(db, cmd, conn):
    db_store = CLIENT._store[db]
    name_only = bool(cmd.get('nameOnly'))
    spec = cmd.get('filter') or {}
    out = []
    for name in sorted(db_store.list_created_collection_names()):
        if name_only:
            entry = {'name': name, 'type': 'collection'}
        else:
            entry = {'name': name, 'type': 'collection', 'options': {},
                     'info': {'readOnly': False, 'uuid': collection_uuid(db_store[name])},
                     'idIndex': dict(ID_INDEX_SPEC)}
        if filter_applies(spec, entry):
            out.append(entry)
    cursor = ServerCursor('%s.$cmd.listCollections' % db, iter(out))
    return cursor_reply(cursor, (cmd.get('cursor') or {}).get('batchSize'))


def cmd_rename_collection(db, cmd, conn):
    source, target = cmd.get('renameCollection'), cmd.get('to')
    if not isinstance(source, str) or not isinstance(target, str) or '.' not in source or '.' not in target:
        raise CommandError(73, 'Invalid source or target namespace')
    src_db, src_name = source.split('.', 1)
    dst_db, dst_name = target.split('.', 1)
    if src_db != dst_db:
        raise unsupported('renameCollection across databases')
    get_coll(dst_db, dst_name)
    db_store = CLIENT._store[src_db]
    if not db_store[src_name].is_created:
        raise CommandError(26, 'Source collection %s does not exist' % source)
    if db_store[dst_name].is_created:
        if not cmd.get('dropTarget'):
            raise CommandError(48, 'target namespace exists')
        db_store[dst_name].drop()
    db_store.rename(src_name, dst_name)
    kill_cursors_for(source)
    return {'ok': 1.0}


def cmd_list_databases(db, cmd, conn):
    names = sorted(CLIENT._store.list_created_database_names())
    entries = [{'name': n, 'sizeOnDisk': 0, 'empty': False} for n in names]
    spec = cmd.get('filter') or {}
    entries = [e for e in entries if filter_applies(spec, e)]
    if cmd.get('nameOnly'):
        return {'databases': [{'name': e['name']} for e in entries], 'ok': 1.0}
    return {'databases': entries, 'totalSize': 0, 'totalSizeMb': 0, 'ok': 1.0}


def cmd_drop_database(db, cmd, conn):
    db_store = CLIENT._store[db]
    for name in list(db_store._collections):
        db_store[name].drop()
    kill_cursors_for(db)
    return {'dropped': db, 'ok': 1.0}


def cmd_db_stats(db, cmd, conn):
    db_store = CLIENT._store[db]
    names = db_store.list_created_collection_names()
    objects = sum(len(db_store[n]._documents) for n in names)
    indexes = sum(1 + len(db_store[n].indexes) for n in names)
    return {'db': db, 'collections': len(names), 'views': 0, 'objects': objects,
            'avgObjSize': 0, 'dataSize': 0, 'storageSize': 0, 'indexes': indexes,
            'indexSize': 0, 'totalSize': 0, 'scaleFactor': 1, 'ok': 1.0}


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------

COMMANDS = {
    'hello': cmd_hello, 'isMaster': cmd_hello, 'ismaster': cmd_hello,
    'ping': cmd_ping, 'buildInfo': cmd_build_info, 'buildinfo': cmd_build_info,
    'endSessions': cmd_ping, 'refreshSessions': cmd_ping, 'startSession': cmd_start_session,
    'getLastError': cmd_get_last_error, 'getlasterror': cmd_get_last_error,
    'whatsmyuri': cmd_whatsmyuri, 'serverStatus': cmd_server_status,
    'commitTransaction': cmd_transaction, 'abortTransaction': cmd_transaction,
    'insert': cmd_insert, 'update': cmd_update, 'delete': cmd_delete,
    'findAndModify': cmd_find_and_modify, 'findandmodify': cmd_find_and_modify,
    'find': cmd_find, 'getMore': cmd_get_more, 'killCursors': cmd_kill_cursors,
    'aggregate': cmd_aggregate, 'count': cmd_count, 'distinct': cmd_distinct,
    'createIndexes': cmd_create_indexes, 'listIndexes': cmd_list_indexes,
    'dropIndexes': cmd_drop_indexes, 'deleteIndexes': cmd_drop_indexes, 'collMod': cmd_coll_mod,
    'create': cmd_create, 'drop': cmd_drop, 'listCollections': cmd_list_collections,
    'renameCollection': cmd_rename_collection, 'listDatabases': cmd_list_databases,
    'dropDatabase': cmd_drop_database, 'dbStats': cmd_db_stats,
}

TRANSACTION_FIELDS = ('txnNumber', 'startTransaction', 'autocommit')
GENERIC_ARGUMENTS = frozenset(['$db', 'lsid', '$readPreference', '$clusterTime', 'writeConcern',
                               'readConcern', 'comment', 'maxTimeMS', 'apiVersion', 'apiStrict',
                               'apiDeprecationErrors'])


def error_reply(code, errmsg, extra=None):
    reply = {'ok': 0.0, 'errmsg': errmsg, 'code': code,
             'codeName': CODE_NAMES.get(code, 'Location%d' % code)}
    if extra:
        reply.update(extra)
    return reply


def run_command(db, cmd, conn):
    """Execute one command document and return the reply document.
    The caller holds STATE."""
    if not cmd:
        return error_reply(59, 'no such command: empty document')
    name = next(iter(cmd))
    if name == '$query' and isinstance(cmd[name], dict):      # legacy wrapped OP_QUERY command
        cmd = cmd[name]
        name = next(iter(cmd))
    handler = COMMANDS.get(name)
    if handler is None:
        return error_reply(59, "no such command: '%s'" % name)
    try:
        if any(field in cmd for field in TRANSACTION_FIELDS):
            cmd_transaction(db, cmd, conn)
        return handler(db, cmd, conn)
    except Exception as exc:
        code, errmsg, extra = error_fields(exc, '%s.%s' % (db, cmd.get(name)))
        return error_reply(code, errmsg, extra)


# ---------------------------------------------------------------------------
# Wire protocol (mockupdb) and connection loop
# ---------------------------------------------------------------------------

class _Reply(object):
    """What mockupdb's reply framing needs from a request: its id."""

    def __init__(self, request_id):
        self.request_id = request_id


class Connection(object):
    def __init__(self, conn_id, peer):
        self.id = conn_id
        self.peer = peer
        self.raw_documents = None     # raw bytes of an insert's documents, if any


def recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionResetError(errno.ECONNRESET, 'client closed the connection')
        got += k
    return bytes(buf)


def handle_message(server, sock, conn, opcode, request_id, body):
    """Bytes to send back for one client message (None: nothing to send)."""
    if opcode == mockupdb.OP_MSG:
        flags = struct.unpack('<I', body[:4])[0]
        try:
            request = OpMsg.unpack(body, sock, server, request_id)
        except Exception as exc:
            if flags & OP_MSG_FLAGS['moreToCome']:
                return None
            return OpMsgReply(error_reply(2, 'invalid OP_MSG: %s' % exc)).reply_bytes(_Reply(request_id))
        cmd = request.doc
        if cmd and next(iter(cmd)) == 'insert':
            conn.raw_documents = raw_document_sequence(body, b'documents')
        started = time.monotonic()
        try:
            with STATE:
                reply = run_command(request.namespace, cmd, conn)
                if flags & OP_MSG_FLAGS['moreToCome']:
                    return None                     # unacknowledged write (w: 0)
                return OpMsgReply(reply).reply_bytes(request)
        finally:
            conn.raw_documents = None
            if VERBOSE:
                log('conn%d %s.%s %.1f ms' % (conn.id, request.namespace, next(iter(cmd), ''),
                                             (time.monotonic() - started) * 1000))
    if opcode == mockupdb.OP_QUERY:
        try:
            request = OpQuery.unpack(body, sock, server, request_id)
        except Exception as exc:
            return OpReply({'$err': 'invalid OP_QUERY: %s' % exc, 'code': 2},
                           flags=REPLY_FLAGS['QueryFailure']).reply_bytes(_Reply(request_id))
        if not request.is_command:
            return OpReply({'$err': 'OP_QUERY is no longer supported. The client driver may require an upgrade.',
                            'code': 5739101, 'ok': 0.0},
                           flags=REPLY_FLAGS['QueryFailure']).reply_bytes(request)
        if VERBOSE:
            log('conn%d %s.%s (OP_QUERY)' % (conn.id, request.namespace, next(iter(request.doc), '')))
        with STATE:
            reply = run_command(request.namespace, request.doc, conn)
            return OpReply(reply).reply_bytes(request)
    log('closing connection %d: unsupported opcode %d' % (conn.id, opcode))
    raise ConnectionAbortedError('unsupported opcode %d' % opcode)


class WireServer(mockupdb.MockupDB):
    """MockupDB whose per-connection loop runs commands against mongomock."""

    _connection_ids = itertools.count(1)

    def _server_loop(self, client, client_addr):
        # Unlike MockupDB's loop this does not hold the MockupDB lock, so
        # connections only wait for each other while a command runs (STATE).
        conn = Connection(next(self._connection_ids), mockupdb.format_addr(client_addr))
        with STATE:
            CONNECTIONS['current'] += 1
            CONNECTIONS['total'] += 1
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not self._stopped:
                header = recv_exact(client, 16)
                length, request_id, _, opcode = struct.unpack('<iiii', header)
                if length < 16 or length > MAX_MESSAGE_SIZE + 16 * 1024:
                    raise ConnectionAbortedError('bad message length %d' % length)
                body = recv_exact(client, length - 16)
                out = handle_message(self, client, conn, opcode, request_id, body)
                if out is not None:
                    client.sendall(out)
        except (OSError, EOFError):
            pass                                   # client went away or server stopping
        except Exception:
            log('connection %d crashed:\n%s' % (conn.id, traceback.format_exc()))
        finally:
            with STATE:
                CONNECTIONS['current'] -= 1
            try:
                client.close()
            except OSError:
                pass


# ---------------------------------------------------------------------------
# Background monitor: TTL deletes and idle cursor reaping
# ---------------------------------------------------------------------------

_DATETIME = datetime.datetime


def ttl_date(doc, parts):
    """The date a TTL index sees in doc: the value itself, the earliest date
    of an array, or None (never expires) for anything else."""
    if len(parts) == 1:
        v = doc.get(parts[0])
        if v.__class__ is _DATETIME:
            return v
        values = v if v.__class__ is list else ()
    else:
        values = path_values(doc, parts)
    dates = [x for x in values if isinstance(x, _DATETIME)]
    return min(dates) if dates else None


def ttl_pass():
    """Delete documents whose TTL-indexed date (the earliest, for arrays)
    plus expireAfterSeconds is in the past. Non-date values never expire.
    Scans in chunks so that commands can run in between."""
    now = datetime.datetime.utcnow()
    with STATE:
        jobs = [(store, name, meta)
                for db_store in list(CLIENT._store._databases.values())
                for store in list(db_store._collections.values())
                for name, meta in list(store.indexes.items())
                if meta.get('expireAfterSeconds') is not None]
    for store, name, meta in jobs:
        parts = meta['key'][0][0].split('.')
        cutoff = now - datetime.timedelta(seconds=float(meta['expireAfterSeconds']))
        partial = meta.get('partialFilterExpression')
        with STATE:
            items = list(store._documents.items())
        for start in range(0, len(items), TTL_CHUNK):
            with STATE:
                if store.indexes.get(name) is not meta:
                    break                          # index or collection dropped meanwhile
                docs = store._documents
                for sid, doc in items[start:start + TTL_CHUNK]:
                    date = ttl_date(doc, parts)
                    if date is None or date >= cutoff or docs.get(sid) is not doc:
                        continue
                    if partial is None or filter_applies(partial, doc):
                        remove_doc(store, sid)


def reap_cursors():
    deadline = time.monotonic() - CURSOR_IDLE_TIMEOUT_S
    with STATE:
        for cid in [cid for cid, c in CURSORS.items() if c.touched < deadline]:
            del CURSORS[cid]


def monitor_loop(interval_s):
    """Runs the TTL pass every interval, like mongod's TTLMonitor (60 s there).
    On big collections a pass is slow; then the monitor waits ten times the
    CPU time the last pass used, so that it takes at most ~10% of the server.
    Expired documents can therefore linger longer, as they can on mongod."""
    pause = interval_s
    while True:
        time.sleep(pause)
        cpu_started = time.thread_time()     # excludes time spent waiting for STATE
        try:
            ttl_pass()
            reap_cursors()
        except Exception:
            log('monitor failed:\n%s' % traceback.format_exc())
        pause = max(interval_s, 10 * (time.thread_time() - cpu_started))


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------

class _Shutdown(Exception):
    pass


def _raise_shutdown(signum, frame):
    raise _Shutdown()


def _watch_stdin():
    try:
        while sys.stdin.buffer.read(65536):
            pass
    except Exception:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv=None):
    global CLIENT, VERBOSE
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--port', type=int, default=27017, help='TCP port on 127.0.0.1; 0 picks a free port')
    parser.add_argument('--ttl-interval-ms', type=int, default=1000, help='TTL monitor period (mongod: 60000)')
    parser.add_argument('--exit-on-stdin-eof', action='store_true', help='exit when stdin closes')
    parser.add_argument('--verbose', action='store_true', help='log every command to stderr')
    args = parser.parse_args(argv)
    VERBOSE = args.verbose

    mongomock.SERVER_VERSION = SERVER_VERSION
    CLIENT = mongomock.MongoClient()
    signal.signal(signal.SIGTERM, _raise_shutdown)
    signal.signal(signal.SIGINT, _raise_shutdown)

    server = WireServer(port=args.port, request_timeout=int(1e6))
    try:
        port = server.run()
        threading.Thread(target=monitor_loop, args=(max(args.ttl_interval_ms, 10) / 1000.0,),
                         name='ttl-monitor', daemon=True).start()
        if args.exit_on_stdin_eof:
            threading.Thread(target=_watch_stdin, name='stdin-watch', daemon=True).start()
        sys.stdout.write('LISTENING %d\n' % port)
        sys.stdout.flush()
        while True:
            time.sleep(3600)
    except (_Shutdown, KeyboardInterrupt):
        pass
    # Daemon threads hold the sockets; close client sockets and leave at once
    # instead of joining threads (MockupDB.stop waits up to 10 s per thread).
    server._stopped = True
    for sock in list(server._server_socks):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == '__main__':
    main()
