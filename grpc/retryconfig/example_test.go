package retryconfig_test

import (
	"fmt"

	"github.com/staggerhq/stagger/grpc/retryconfig"
)

func ExampleParse() {
	c, err := retryconfig.Parse([]byte(`{
	  "methodConfig": [{
	    "name": [{"service": "payments.Payments"}],
	    "retryPolicy": {
	      "maxAttempts": 4,
	      "initialBackoff": "0.1s",
	      "maxBackoff": "1s",
	      "backoffMultiplier": 2,
	      "retryableStatusCodes": ["UNAVAILABLE"]
	    }
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	m := c.Methods["/payments.Payments/"]
	fmt.Println(m.Policy.MaxAttempts, m.RetryCodes, c.NewBudget != nil)
	_, err = retryconfig.Parse([]byte(`{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 1}}]}`))
	fmt.Println(err)
	// Output:
	// 4 [Unavailable] true
	// staggergrpc: invalid configuration: methodConfig[0].retryPolicy.initialBackoff is required
}
