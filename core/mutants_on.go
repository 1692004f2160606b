//go:build sluicemutants

package core

// on says whether m has x's deliberate bug switched on. Only builds with
// the sluicemutants tag (the mutation tests', core/mutation) have it.
func (m Mutant) on(x Mutant) bool { return m&x != 0 }
