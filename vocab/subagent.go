package vocab

import "strings"

// SubAgentMark separates a sub-agent's id from its parent's: a sub-agent
// is PARENT/sub-HASH (agentsvc.Host derives HASH from the spawning tool
// call's id), so any reader of a log can follow the tree.
const SubAgentMark = "/sub-"

// ParentOf returns the id of the agent that spawned sub-agent id, or ""
// for a top-level session.
func ParentOf(id ID) ID {
	if i := strings.LastIndex(string(id), SubAgentMark); i >= 0 {
		return id[:i]
	}
	return ""
}
