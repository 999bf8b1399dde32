// Package tests holds scribe's black-box tests: they build the scribe
// binary once and run real daemons and writer processes against each
// other, as users do.
package tests
