package simkit

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every configuration error; the message names the
// parameter (the CLI flag of the same name) and the rule it broke.
var ErrInvalid = errors.New("sim: invalid parameter")

// Param is one setting of a scenario, bound to a field of its
// configuration. It implements flag.Value, so the CLI registers each as a
// flag of the same name: Set parses and checks the rule at once, and Check
// re-checks a value set in code.
type Param struct {
	// Name is the parameter's (and flag's) name, e.g. "workers".
	Name string
	// Usage is the one-line help, rule included.
	Usage string
	get   func() string
	set   func(string) error
	check func() error
	arg   string // placeholder of the value in help ("X" for a decimal); "" to judge by the default
}

// Placeholder is how a help text writes the parameter's value: "X" for a
// decimal number, "" to judge by the default.
func (p *Param) Placeholder() string { return p.arg }

// String returns the current value (empty for an unbound Param).
func (p *Param) String() string {
	if p == nil || p.get == nil {
		return ""
	}
	return p.get()
}

// Set parses s into the bound field and checks the rule.
func (p *Param) Set(s string) error {
	if err := p.set(s); err != nil {
		return err
	}
	return p.check()
}

// Check verifies the bound field's current value; the error wraps
// ErrInvalid and names the parameter.
func (p *Param) Check() error {
	if err := p.check(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, p.Name, err)
	}
	return nil
}

// checkParams checks every parameter and returns the first error.
func checkParams(ps []*Param) error {
	for _, p := range ps {
		if err := p.Check(); err != nil {
			return err
		}
	}
	return nil
}

func invalid(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, name, fmt.Sprintf(format, args...))
}

func intParam(v *int, name, usage string, lo, hi int) *Param {
	return &Param{
		Name: name, Usage: usage,
		get: func() string { return strconv.Itoa(*v) },
		set: func(s string) error {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("must be a whole number in [%d, %d], got %q", lo, hi, s)
			}
			*v = n
			return nil
		},
		check: inRange(v, lo, hi),
	}
}

func durParam(v *time.Duration, name, usage string, lo, hi time.Duration) *Param {
	return &Param{
		Name: name, Usage: usage,
		get: func() string { return v.String() },
		set: func(s string) error {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("must be a duration such as 250ms or 2s in [%v, %v], got %q", lo, hi, s)
			}
			*v = d
			return nil
		},
		check: inRange(v, lo, hi),
	}
}

// inRange returns the rule of intParam and durParam: lo <= *v <= hi.
func inRange[T int | time.Duration](v *T, lo, hi T) func() error {
	return func() error {
		if *v < lo || *v > hi {
			return fmt.Errorf("must be in [%v, %v], got %v", lo, hi, *v)
		}
		return nil
	}
}

// displayFloat prints a setting with the precision a reader needs: whole
// numbers from 1000 up (a default of 40000/3 reads 13333), else six
// significant digits.
func displayFloat(v float64) string {
	if math.Abs(v) >= 1000 && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

func floatParam(v *float64, name, usage string, lo, hi float64) *Param {
	return &Param{
		Name: name, Usage: usage, arg: "X",
		get: func() string { return displayFloat(*v) },
		set: func(s string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("must be a finite number in [%g, %g], got %q", lo, hi, s)
			}
			*v = f
			return nil
		},
		check: func() error {
			if math.IsNaN(*v) || math.IsInf(*v, 0) || *v < lo || *v > hi {
				return fmt.Errorf("must be a finite number in [%g, %g], got %v", lo, hi, *v)
			}
			return nil
		},
	}
}

// listParam is a list of names from choices, given comma-separated or by
// repeating the flag (the first Set replaces the default).
func listParam(v *[]string, name, usage string, choices []string) *Param {
	fresh := true
	return &Param{
		Name: name, Usage: usage + " (" + strings.Join(choices, ", ") + "; repeat or comma-separate)",
		get: func() string { return strings.Join(*v, ",") },
		set: func(s string) error {
			if fresh {
				*v, fresh = nil, false
			}
			for _, f := range strings.Split(s, ",") {
				f = strings.TrimSpace(f)
				if !slices.Contains(choices, f) {
					return fmt.Errorf("unknown name %q (choose from %s)", f, strings.Join(choices, ", "))
				}
				if !slices.Contains(*v, f) {
					*v = append(*v, f)
				}
			}
			return nil
		},
		check: func() error {
			if len(*v) == 0 {
				return errors.New("needs at least one name")
			}
			for _, f := range *v {
				if !slices.Contains(choices, f) {
					return fmt.Errorf("unknown name %q (choose from %s)", f, strings.Join(choices, ", "))
				}
			}
			return nil
		},
	}
}

// choiceParam is one name from choices.
func choiceParam(v *string, name, usage string, choices []string) *Param {
	return &Param{
		Name: name, Usage: usage + " (one of " + strings.Join(choices, ", ") + ")",
		get: func() string { return *v },
		set: func(s string) error {
			*v = strings.TrimSpace(s)
			return nil
		},
		check: func() error {
			if !slices.Contains(choices, *v) {
				return fmt.Errorf("unknown name %q (choose one of %s)", *v, strings.Join(choices, ", "))
			}
			return nil
		},
	}
}

// floatsParam is a comma-separated list of numbers in [lo, hi].
func floatsParam(v *[]float64, name, usage string, lo, hi float64) *Param {
	return &Param{
		Name: name, Usage: usage,
		get: func() string {
			parts := make([]string, len(*v))
			for i, f := range *v {
				parts[i] = displayFloat(f)
			}
			return strings.Join(parts, ",")
		},
		set: func(s string) error {
			*v = nil
			for _, f := range strings.Split(s, ",") {
				x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
				if err != nil {
					return fmt.Errorf("want numbers in [%g, %g] such as 0,0.05, got %q", lo, hi, f)
				}
				*v = append(*v, x)
			}
			return nil
		},
		check: func() error {
			if len(*v) == 0 {
				return fmt.Errorf("needs at least one number")
			}
			for _, x := range *v {
				if math.IsNaN(x) || x < lo || x > hi {
					return fmt.Errorf("each must be a number in [%g, %g], got %v", lo, hi, x)
				}
			}
			return nil
		},
	}
}
