// Package cli holds the cobra commands of the sluice binary; main.go only
// calls Execute. Exit codes follow sysexits: 64 usage, 69 unavailable,
// 75 not obtained.
package cli
