// Command bpsim simulates a multi-tenant dispatcher cluster.
package main

func main() {}
