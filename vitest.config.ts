import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Native addon + worker_threads tests: separate processes keep one crash from hiding others.
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
})
