// Package bench holds stagger's side-by-side benchmarks against other Go
// libraries. It is its own module so that the peers are required here and
// nowhere else; run every comparison in one go test -bench invocation (see
// BENCHMARKS.md at the repository root for the commands and the numbers).
package bench
