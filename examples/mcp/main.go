// Command mcp runs one Ruby program that uses two real MCP servers in one
// eval: @modelcontextprotocol/server-filesystem over a temporary directory
// of meeting notes, and @modelcontextprotocol/server-memory's knowledge
// graph. The program reads every note through the filesystem server,
// records who attended which meeting in the graph, and answers a question
// from the graph: one eval, many tool calls, no model round trips between
// them. The servers are installed once (pinned versions, npm) into the
// shared test cache.
//
//	go run ./examples/mcp
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/npmtest"
	"github.com/gloveboxhq/glovebox/mcptools"
)

const program = `
dir = list_allowed_directories["text"].lines.last.strip
notes = list_directory(path: dir)["text"].lines.grep(/\[FILE\]/).map { it.sub("[FILE]", "").strip }.sort
meetings = notes.map do |name|
  text = read_text_file(path: File.join(dir, name))["text"]
  people = text[/^attendees: (.*)$/, 1].split(",").map(&:strip)
  { name: name.delete_suffix(".txt"), entityType: "meeting", observations: [text.lines.first.strip], people: people }
end
people = meetings.flat_map { it[:people] }.uniq
create_entities(entities: meetings.map { it.except(:people) } + people.map { { name: it, entityType: "person", observations: [] } })
create_relations(relations: meetings.flat_map { |m| m[:people].map { { from: it, to: m[:name], relationType: "attended" } } })
graph = read_graph["structured"]
busiest = graph["relations"].group_by { it["from"] }.max_by { |_, rs| rs.size }
{ meetings: meetings.size, people: people.size, busiest: busiest[0], attended: busiest[1].map { it["to"] }.sort }
`

func main() {
	ctx := context.Background()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "examples/mcp:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	root, err := npmtest.Install(ctx, "@modelcontextprotocol/server-memory", "@modelcontextprotocol/server-filesystem")
	if err != nil {
		return err
	}
	bin := func(name string) string { return filepath.Join(root, "node_modules", ".bin", name) }
	tmp, err := os.MkdirTemp("", "glovebox-mcp-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	notes := filepath.Join(tmp, "notes")
	if err := os.Mkdir(notes, 0o755); err != nil {
		return err
	}
	for name, text := range map[string]string{
		"kickoff.txt": "Project kickoff, 3 March.\nattendees: Ada, Grace, Linus\n",
		"review.txt":  "Design review, 10 March.\nattendees: Ada, Barbara\n",
		"retro.txt":   "Sprint retro, 24 March.\nattendees: Grace, Ada, Barbara\n",
		"budget.txt":  "Budget sync, 31 March.\nattendees: Linus\n",
	} {
		if err := os.WriteFile(filepath.Join(notes, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	var ts glovebox.Toolset
	b, err := mcptools.Bind(ctx, &ts, mcptools.Config{},
		mcptools.Server{Name: "files", Command: []string{bin("mcp-server-filesystem"), notes}},
		mcptools.Server{Name: "memory", Command: []string{bin("mcp-server-memory")},
			Env: []string{"MEMORY_FILE_PATH=" + filepath.Join(tmp, "graph.jsonl")}})
	if err != nil {
		return err
	}
	defer b.Close()
	for _, s := range b.Notes() {
		fmt.Printf("bound %s: %d tools\n", s.Name, len(s.Tools))
	}
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Timeout: 20 * time.Second}, PoolSize: -1})
	if err != nil {
		return err
	}
	defer rt.Close()
	fmt.Printf("--- program\n%s\n", program)
	res, err := rt.Eval(ctx, program)
	if err != nil {
		return err
	}
	fmt.Printf("--- %d tool calls in one eval:", len(res.ToolCalls))
	for _, c := range res.ToolCalls {
		fmt.Printf(" %s", c.Name)
	}
	out, _ := json.MarshalIndent(res.Value, "", "  ")
	fmt.Printf("\n--- status %s, value:\n%s\n", res.Status, out)
	if res.Status != glovebox.StatusOK {
		return fmt.Errorf("the program failed: %v", res.Err())
	}
	return nil
}
