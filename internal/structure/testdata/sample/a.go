package sample

// Entry calls down into b.go, which calls back up: a two-way pair.
func Entry() int { return step() + (&T{}).M() }

func helper() int { return 1 }

// unreached is called by nothing.
func unreached() int { return 0 }
