// Package seal holds the key of methods that only this module's packages
// call. A method that takes a seal.Key can stand in an exported interface
// and be called across the module's packages, as the data path needs
// (uverbs.AH's provider form, read by the providers through
// wr.AddressHandle), but a program outside the module cannot name the
// type: it cannot implement the interface, and the method is plainly not
// part of the API.
package seal

// Key is the parameter of sealed methods: the module passes Key{}.
type Key struct{ _ key }

type key struct{}
