package broker

import "fmt"

// Describe names an approver for logs.
func Describe(a Approver) string {
	if s, ok := a.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", a)
}
