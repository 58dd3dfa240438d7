// Command stagger-store runs the stagger commands that need a database or a
// broker client: the durable queue (stagger queue …) and the broker
// commands (stagger broker …). It is stagger's companion program: `stagger
// queue …` runs it with the same arguments, standard streams and exit code,
// so it is seldom run by name. `go install
// github.com/staggerhq/stagger/cmd/stagger/...@VERSION` installs both.
//
// Each subcommand lives in its own file and registers itself in init, as in
// stagger; both share the dispatcher, the flag style and the exit codes
// (internal/clikit).
package main

import "github.com/staggerhq/stagger/cmd/stagger/internal/clikit"

func main() {
	// A second signal ends the process at once: the --exec commands still
	// running are killed with their process groups.
	clikit.OnExitNow = killExecGroups
	clikit.Main()
}
