module github.com/staggerhq/stagger/cmd/stagger

go 1.25

require (
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/staggerhq/stagger v0.0.0
)

require github.com/hashicorp/go-cleanhttp v0.5.2 // indirect

replace github.com/staggerhq/stagger => ../..
