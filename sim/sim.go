package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/staggerhq/stagger/internal/simkit"
)

// ErrInvalid is wrapped by every error about a scenario's name or
// parameters; the message names the parameter and the rule it broke.
var ErrInvalid = simkit.ErrInvalid

// Scenario is one experiment of `stagger sim`.
type Scenario struct {
	Name    string  // what Run takes, e.g. "herd"
	Summary string  // one line, as `stagger sim list` prints it
	Params  []Param // its parameters, in the order of `stagger sim NAME --help`
}

// Param is one parameter of a scenario, by the name of its flag.
type Param struct {
	Name    string // e.g. "workers"
	Usage   string // one line of help, the rule included
	Default string // the default value, as Run takes it
}

// Options are the settings every run shares.
type Options struct {
	// Seed makes a run reproducible: the same parameters and Seed give the
	// same Result, whatever Parallel is.
	Seed uint64
	// Parallel is the number of goroutines that run the independent
	// simulations of a sweep; 0 means GOMAXPROCS. It never changes results.
	Parallel int
	// Progress, if set, is called after each independent simulation of a
	// sweep with the number done and the total, from any goroutine.
	Progress func(done, total int)
}

// Scenarios returns every scenario, in the order of `stagger sim list`.
func Scenarios() []Scenario {
	kit := simkit.Scenarios()
	out := make([]Scenario, len(kit))
	for i, s := range kit {
		ps := s.New().Params()
		out[i] = Scenario{Name: s.Name, Summary: s.Summary, Params: make([]Param, len(ps))}
		for j, p := range ps {
			out[i].Params[j] = Param{Name: p.Name, Usage: p.Usage, Default: p.String()}
		}
	}
	return out
}

// Run runs the scenario called name with its defaults changed by params
// (parameter name to value, e.g. {"workers": "500", "outage": "10s"}; lists
// are comma-separated). An unknown scenario or parameter, or a value that
// breaks its rule, is an error wrapping ErrInvalid; so is a combination of
// values the scenario cannot run. A run that ctx ends returns ctx's error.
func Run(ctx context.Context, name string, params map[string]string, o Options) (*Result, error) {
	sc, ok := simkit.Lookup(name)
	if !ok {
		names := make([]string, 0, 16)
		for _, s := range simkit.Scenarios() {
			names = append(names, s.Name)
		}
		return nil, fmt.Errorf("%w: unknown scenario %q (one of %s)", ErrInvalid, name, strings.Join(names, ", "))
	}
	cfg := sc.New()
	ps := cfg.Params()
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first error does not depend on map order
	for _, k := range keys {
		i := slices.IndexFunc(ps, func(p *simkit.Param) bool { return p.Name == k })
		if i < 0 {
			known := make([]string, len(ps))
			for j, p := range ps {
				known[j] = p.Name
			}
			return nil, fmt.Errorf("%w: %s has no parameter %q (it has %s)", ErrInvalid, name, k, strings.Join(known, ", "))
		}
		if err := ps[i].Set(params[k]); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, k, err)
		}
	}
	res, err := cfg.Run(ctx, simkit.Options(o))
	if err != nil {
		return nil, err
	}
	return res, nil
}
