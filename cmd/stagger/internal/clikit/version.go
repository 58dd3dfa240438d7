package clikit

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

func init() {
	Register(Command{Name: "version", Summary: "print the build's module version and VCS revision", Run: runVersion})
}

func versionHelp(w io.Writer) {
	fmt.Fprintln(w, "Usage: stagger version   (or stagger --version)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Prints the module version of this build, the VCS revision it was built from")
	fmt.Fprintln(w, "(with \"(modified)\" when the tree had changes) and the Go release that built")
	fmt.Fprintln(w, "it, as the go command recorded them. \"go install .../cmd/stagger@v0.1.0\"")
	fmt.Fprintln(w, "prints v0.1.0 and no revision: a module download carries none. A build in a")
	fmt.Fprintln(w, "git checkout prints a pseudo-version and the commit.")
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stagger version", flag.ContinueOnError)
	if code, ok := ParseFlags(fs, args, stdout, stderr, versionHelp); !ok {
		return code
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprint(stdout, FormatVersion(bi))
	return ExitOK
}

// FormatVersion renders the build information: "stagger <module version>",
// the VCS revision line and the Go release, one per line. bi may be nil (a
// binary built without module support).
func FormatVersion(bi *debug.BuildInfo) string {
	var b strings.Builder
	version, goVersion := "(devel)", "unknown Go release"
	settings := map[string]string{}
	if bi != nil {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	fmt.Fprintf(&b, "stagger %s\n", version)
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "revision %s", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " %s", t)
		}
		if settings["vcs.modified"] == "true" {
			b.WriteString(" (modified)")
		}
		b.WriteString("\n")
	} else {
		b.WriteString("revision unknown (not recorded: a module download, or built with -buildvcs=false)\n")
	}
	if goos, goarch := settings["GOOS"], settings["GOARCH"]; goos != "" && goarch != "" {
		goVersion += " " + goos + "/" + goarch
	}
	fmt.Fprintln(&b, goVersion)
	return b.String()
}
