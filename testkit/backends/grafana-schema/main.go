// Checks Grafana dashboards against Grafana's published schema: the dashboard
// model of grafana-foundation-sdk (generated from Grafana's own schemas), decoded
// strictly (an unknown field anywhere is an error, each panel's options and field
// config by its panel plugin's schema) and then validated.
//
//	grafana-dashboard-check FILE...
//
// The export wrapper's `__inputs`, `__requires` and `__elements` (what Grafana's
// "Export for sharing externally" adds around the model) are set aside first.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func check(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	for _, wrapper := range []string{"__inputs", "__requires", "__elements"} {
		delete(fields, wrapper)
	}
	model, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	var board dashboard.Dashboard
	if err := board.UnmarshalJSONStrict(model); !noErrors(err) {
		return fmt.Errorf("strict decoding: %w", err)
	}
	if err := board.Validate(); !noErrors(err) {
		return fmt.Errorf("validation: %w", err)
	}
	// The kinds are read from the input: the SDK's decoder drops a panel it decoded
	// without error (its empty error list is a non-nil interface), after checking it.
	var panels struct {
		Panels []struct {
			Type string `json:"type"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(model, &panels); err != nil {
		return err
	}
	kinds := map[string]int{}
	for _, panel := range panels.Panels {
		kinds[panel.Type]++
	}
	names := make([]string, 0, len(kinds))
	for kind := range kinds {
		names = append(names, kind)
	}
	sort.Strings(names)
	fmt.Printf("%s: valid; %d panels:", path, len(panels.Panels))
	for _, kind := range names {
		fmt.Printf(" %s=%d", kind, kinds[kind])
	}
	fmt.Println()
	return nil
}

// noErrors tells whether err holds no error: the SDK's decoder answers an empty
// cog.BuildErrors, a non-nil interface, when nothing is wrong.
func noErrors(err error) bool {
	if errs, ok := err.(cog.BuildErrors); ok {
		return len(errs) == 0
	}
	return err == nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: grafana-dashboard-check FILE...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
