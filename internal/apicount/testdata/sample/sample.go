// Package sample is apicount's fixture: its exported surface is known.
package sample

// A and B count as two names; c is unexported.
const (
	A = 1
	B = 2
	c = 3
)

// V counts; w does not.
var V, w = 1, 2

// T counts, and so do its constructor, its constant and its exported method.
type T int

// TZero is a constant of type T.
const TZero T = 0

// NewT is filed under T by go/doc and still counts as a name.
func NewT() T { return 0 }

// M is a method.
func (T) M() {}

func (T) m() {}

type u int

// M of an unexported type is not part of the API.
func (u) M() {}

// F counts.
func F() {}
