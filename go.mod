module ollie

go 1.26.8

require (
	9fans.net/go v0.0.8-0.20250307142834-96bdba94b63f
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	golang.org/x/sys v0.50.0
	golang.org/x/text v0.14.0
)
