//go:build !race

package ns_test

const raceBuild = false
