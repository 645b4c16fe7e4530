package sample

// TestOnly is in a test file and does not count.
func TestOnly() {}
