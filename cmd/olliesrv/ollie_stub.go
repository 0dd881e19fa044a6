//go:build olliestub

package main

func ollieMain(args []string) int { return 2 }
