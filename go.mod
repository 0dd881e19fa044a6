module ollie

go 1.26.8

require (
	9fans.net/go v0.0.8-0.20250307142834-96bdba94b63f
	golang.org/x/sys v0.50.0
)
