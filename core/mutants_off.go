//go:build !sluicemutants

package core

// on is false: this build has no mutants (core/mutation), and the
// branches they would take are dead code.
func (Mutant) on(Mutant) bool { return false }
