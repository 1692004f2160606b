// Package mutation runs the tests that need deliberately broken builds.
//
// The lock core and the election carry mutants: deliberate bugs
// (core.Mutant, election.Mutant) that the mutation tests switch on to
// prove that the simulator, the explorer and the scenarios catch each
// broken rule. They exist only in builds with the sluicemutants tag; in
// every other build, the released binary's among them, their branches
// are dead code the compiler drops.
//
// The contract: a test case that needs the mutants asks Need; in a build
// without them Need notes the test and says no, and the package's
// TestMain, through Main, runs every noted test again in a child `go
// test -tags sluicemutants`, whose failure fails the run. So plain `go
// test ./...` still runs every mutation test.
package mutation
