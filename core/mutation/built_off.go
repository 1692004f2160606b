//go:build !sluicemutants

package mutation

// Built: this build has the mutants.
const Built = false
