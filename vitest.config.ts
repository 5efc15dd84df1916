import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Builds dist/ when it is older than src/: the tests that run dist/cli.js test the code as it is.
    globalSetup: ['test/helpers/build-dist.ts'],
    // Native addon + worker_threads tests: separate processes keep one crash from hiding others.
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
})
