package sqlitestore

// claimerOf returns s's Claimer as its concrete type, with every call it
// serves.
func claimerOf(s *Store) *claimer { return (*claimer)(s) }
