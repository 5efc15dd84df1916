// How a client's value is repeated in answers and log lines: whole when short, else cut.
import { describe, expect, it } from 'vitest'
import { ECHO_CHARS, echo } from '../../src/core/echo.js'

describe('echo', () => {
  it('keeps a value up to ECHO_CHARS whole', () => {
    const v = 'a'.repeat(ECHO_CHARS)
    expect(echo(v)).toBe(v)
    expect(echo('')).toBe('')
  })

  it('cuts a longer one to its first ECHO_CHARS characters and says how long it was', () => {
    expect(echo('b'.repeat(ECHO_CHARS) + 'tail')).toBe(`${'b'.repeat(ECHO_CHARS)}... (${ECHO_CHARS + 4} characters)`)
  })

  it('never cuts a surrogate pair in half', () => {
    const v = 'c'.repeat(ECHO_CHARS - 1) + '\u{1F600}' + 'd'
    const cut = echo(v)
    expect(cut.startsWith('c'.repeat(ECHO_CHARS - 1) + '...')).toBe(true)
    expect(cut).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/)
  })
})
