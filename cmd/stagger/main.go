// Command stagger is the command line of the stagger toolkit: the retry lab,
// the simulator, the policy check and the counting fault proxy, and, through
// its companion program stagger-store, the durable queue and the broker
// commands.
//
// The commands that need a database or a broker client (queue, broker) live
// in stagger-store, so that this program builds from an empty build cache
// without compiling the SQLite, PostgreSQL and broker code: `go run
// ./cmd/stagger lab` is the first thing a reader runs. `stagger queue …`
// runs stagger-store with the same arguments (companion.go).
//
// Each subcommand lives in its own file and registers itself in init, so the
// dispatcher (internal/clikit) never changes when a subcommand is added.
package main

import "github.com/staggerhq/stagger/cmd/stagger/internal/clikit"

func main() { clikit.Main() }
