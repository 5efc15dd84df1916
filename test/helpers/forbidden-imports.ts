// Which imports of a graph cross from one set of folders into another: a layering rule,
// written as the folders a file may be in and the folders it may not import.
/** The edges `from -> to` of `graph` whose importer is under one of `from` and whose target is under one of `to`. */
export function folderCrossings(graph: ReadonlyMap<string, readonly string[]>, from: readonly string[], to: readonly string[]): string[] {
  const under = (file: string, dirs: readonly string[]) => dirs.some((d) => file.startsWith(`${d}/`))
  return [...graph].flatMap(([f, targets]) => (under(f, from) ? targets.filter((t) => under(t, to)).map((t) => `${f} -> ${t}`) : []))
}
