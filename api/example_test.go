package api_test

import (
	"encoding/json"
	"fmt"

	"coord/api"
)

// A client decodes an error answer by its code, never its message; the
// code says the status, and whether another attempt may succeed.
func Example() {
	body := []byte(`{"error":"lease held by b","code":"held","holder":"b","token":40}`)
	var e api.ErrorResponse
	if err := json.Unmarshal(body, &e); err != nil {
		panic(err)
	}
	fmt.Println(e.Code, e.Code.Status(), e.Code.Retry(), *e.Holder, *e.Token)
	// Output: held 409 false b 40
}
