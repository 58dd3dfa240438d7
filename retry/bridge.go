package retry

import "github.com/staggerhq/stagger/internal/stepcore"

// Step is for package retry/retrydriver, and of no use elsewhere: its
// argument's type is internal to this repository, so only retrydriver (and
// this repository's own code) can call it. It hands a driver's Step the
// step [Do] runs (the same rules, not a copy), whose methods retrydriver
// documents.
func (Decision) Step(s *stepcore.Step[Policy, Delivery, Class, Reason]) *step {
	return (*step)(s)
}
