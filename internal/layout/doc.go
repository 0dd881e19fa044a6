// Package layout holds tests of the repository's shape: which packages may link which.
package layout
