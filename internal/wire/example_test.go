package wire_test

import (
	"errors"
	"fmt"

	"coord/internal/wire"
)

var errMalformed = errors.New("example: malformed")

// A record encoded and decoded again; then the same bytes cut short, where
// the decoder's first error says what it was reading.
func Example() {
	var e wire.Encoder
	e.String("leader")
	e.Uvarint(42)
	e.Bool(true)

	d := wire.NewDecoder(e.Buf, errMalformed)
	name, token, held := d.String("name", 1024), d.Uvarint("token"), d.Bool("held")
	fmt.Println(name, token, held, d.Done())

	d = wire.NewDecoder(e.Buf[:len(e.Buf)-1], errMalformed)
	d.String("name", 1024)
	d.Uvarint("token")
	d.Bool("held")
	err := d.Done()
	fmt.Println(errors.Is(err, errMalformed), err)
	// Output:
	// leader 42 true <nil>
	// true example: malformed: held: truncated
}
