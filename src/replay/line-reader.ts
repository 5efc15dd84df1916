// Lines of a file, read synchronously in chunks. Closed-loop replay draws requests one at a
// time from inside the simulation's clock (a client sends its next request when the last
// one finishes), where nothing can be awaited, so a trace has to be readable without
// promises; reading in chunks keeps memory at one chunk plus one line, however long the file.
//
// Line ends are those of node:readline with crlfDelay Infinity (\n, \r\n, or a lone \r), so
// the openai-format reader sees exactly the lines it did when it was built on readline.
import { closeSync, openSync, readSync } from 'node:fs'
import { StringDecoder } from 'node:string_decoder'

const CHUNK_BYTES = 1 << 20

/** The file's lines without their line ends; a last line without one is still yielded. */
export function* readLinesSync(path: string, chunkBytes = CHUNK_BYTES): Generator<string, void, undefined> {
  const fd = openSync(path, 'r')
  try {
    const buf = Buffer.allocUnsafe(chunkBytes)
    // A chunk can end inside a multi-byte character; the decoder holds its first bytes.
    const decoder = new StringDecoder('utf8')
    let pending = ''
    for (;;) {
      const n = readSync(fd, buf, 0, chunkBytes, null)
      const eof = n === 0
      pending += eof ? decoder.end() : decoder.write(buf.subarray(0, n))
      let start = 0
      // Searched once per chunk, not per line: most files have no \r, and looking for it
      // from every line start would rescan the rest of the chunk each time.
      let cr = pending.indexOf('\r')
      for (;;) {
        const nl = pending.indexOf('\n', start)
        if (cr >= 0 && cr < start) cr = pending.indexOf('\r', start)
        let end: number
        let next: number
        if (cr >= 0 && (nl < 0 || cr < nl)) {
          // A \r as the chunk's last character may be the first half of a \r\n.
          if (cr === pending.length - 1 && !eof) break
          end = cr
          next = pending.charCodeAt(cr + 1) === 10 ? cr + 2 : cr + 1
        } else if (nl >= 0) {
          end = nl
          next = nl + 1
        } else {
          break
        }
        yield pending.slice(start, end)
        start = next
      }
      pending = pending.slice(start)
      if (eof) {
        if (pending !== '') yield pending
        return
      }
    }
  } finally {
    closeSync(fd)
  }
}
