// The service turns V8's allocation-site pretenuring off (platform/v8-flags.ts) unless the
// operator's command line says otherwise.
import t from 'tap'
import { applyV8Flags } from '../../platform/v8-flags.js'

t.test('pretenuring is turned off when the command line does not mention it', async t => {
  t.same(applyV8Flags([]), ['--no-allocation-site-pretenuring'])
  t.same(applyV8Flags(['--max-old-space-size=2048', '--import', '@tapjs/typescript/import']), ['--no-allocation-site-pretenuring'])
})

t.test('a setting on the command line wins, either way and in either spelling', async t => {
  for (const given of ['--allocation-site-pretenuring', '--allocation_site_pretenuring', '--no-allocation-site-pretenuring', '--no_allocation_site_pretenuring']) {
    t.same(applyV8Flags(['--enable-source-maps', given]), [], given)
  }
})
