#!/bin/sh
# netns_agent.sh: a remote-shell agent for sparsecomm-run --rsh-agent in the tests: the
# "hosts" are network namespaces on this machine. Called as `netns_agent.sh HOST COMMAND`
# (like ssh), it runs COMMAND with sh inside the namespace that $SC_AGENT_HOSTS maps HOST
# to ("ADDRESS=NAMESPACE ..." pairs), with the agent's stdin, so that the launcher's
# tether sees it close.
set -u
if [ $# -ne 2 ]; then
	echo "netns_agent.sh: usage: netns_agent.sh HOST COMMAND" >&2
	exit 255
fi
for pair in ${SC_AGENT_HOSTS:-}; do
	if [ "${pair%%=*}" = "$1" ]; then
		exec ip netns exec "${pair#*=}" sh -c "$2"
	fi
done
echo "netns_agent.sh: no namespace for host '$1' in SC_AGENT_HOSTS" >&2
exit 255
