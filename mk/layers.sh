#!/bin/sh
# layers.sh: the layer check, `make check-layers` (docs/design.md, "Layers"). Reads the
# #include "..." lines of every file under daemon/ and fails, naming the file, the line
# and the include, where one goes in a direction a rule of RULES forbids, and where the
# layers of CYCLE include each other in a circle. Then, where the build has them, it checks
# that the daemon's internals (build/lib/libscd.a) use nothing main.c defines: what a layer
# asks of the process goes through the hooks main.c gives it (scd_ctl_upcalls_t,
# scd_world_hooks_t). Takes about a second.
#
#   sh mk/layers.sh [ROOT]    ROOT: the source tree to check (default: this one)
set -eu

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}

# One rule a line: FROM | TO | why. FROM and TO are lists of patterns of paths under
# daemon/: shell patterns (ctl/* is the folder ctl/; main.c is the entry point, daemon.h the
# daemon's struct), where a FROM pattern with ! in front takes out what it matches. A file
# that matches FROM may not include one that matches TO. A new layer (a folder) gets its
# line here, and its place in the lists of the layers above and below it.
RULES='
util/* device/* model/* transport/* scheme/* | coll/* engine/* ctl/* world/* metrics/* main.c daemon.h | a lower layer knows nothing of the higher ones
coll/* | engine/* ctl/* world/* metrics/* main.c | the collectives sit between the engine and the schemes: the engine runs them, they know nothing above
config/* | engine/* ctl/* metrics/* main.c daemon.h | every layer reads the configuration, which checks values against the lower layers and the fusion plan modes only
engine/* | world/* ctl/* metrics/* main.c | jobs reach the engine filled in, and it hands them back through a queue
ctl/* | world/* metrics/* main.c | what ctl tells the world goes through scd_ctl_upcalls_t (ctl/ctl.h), wired by main.c
world/* | metrics/* main.c | the world reaches the process through scd_world_hooks_t (world/world.h), wired by main.c
metrics/* | main.c | main.c starts the metrics endpoint
* !device/* !transport/nccl.c | device/cuda.h device/cuda_free.h | only the device layer and the nccl transport call CUDA
'

# Includes a rule above forbids that the code still has, one a line: FROM TO (paths under
# daemon/). Each is a debt, not a permission: the check fails when a listed include is no
# longer there (or no longer forbidden), so that the list only shrinks.
ALLOWED='
'

# The layers that must not include each other in a circle, directly or through one another.
CYCLE='main.c engine/* ctl/* world/* coll/*'

cd "$root"
[ -d daemon ] || { echo "layers: $root has no daemon/" >&2; exit 2; }
files=$(find daemon -name '*.[ch]' | sed 's|^daemon/||' | sort)
# file:line:text of every quoted include (grep -H: the file's name even when there is one)
incs=$(cd daemon && grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $files || true)

FILES=$files INCS=$incs RULES=$RULES ALLOWED=$ALLOWED CYCLE=$CYCLE awk '
# A shell pattern as an anchored regular expression (* and ? match / too, as in case).
function pat_re(p,   r, i, c) {
	r = "^"
	for (i = 1; i <= length(p); i++) {
		c = substr(p, i, 1)
		if (c == "*") r = r ".*"
		else if (c == "?") r = r "."
		else if (index(".[]()+^$|\\{}", c)) r = r "\\" c
		else r = r c
	}
	return r "$"
}
# True when path matches the pattern list (patterns with ! in front take out).
function match_list(path, list,   n, i, p, a, hit) {
	n = split(list, a, /[ \t]+/)
	hit = 0
	for (i = 1; i <= n; i++) {
		p = a[i]
		if (p == "") continue
		if (substr(p, 1, 1) == "!") {
			if (path ~ pat_re(substr(p, 2))) return 0
		} else if (path ~ pat_re(p)) hit = 1
	}
	return hit
}
# A path with its . and .. parts resolved ("world/../main.c" is "main.c"); a path above
# daemon/ comes back with its leading ../ and so matches no file of it.
function norm(p,   n, i, a, out, k) {
	n = split(p, a, "/")
	k = 0
	for (i = 1; i <= n; i++) {
		if (a[i] == "." || a[i] == "") continue
		if (a[i] == ".." && k > 0 && out[k] != "..") k--
		else out[++k] = a[i]
	}
	p = ""
	for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
	return p
}
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
# The layer of a file among the CYCLE layers, "" when it is none of them.
function cycle_layer(path,   i) {
	for (i = 1; i <= ncl; i++)
		if (path ~ pat_re(cl[i])) return cl[i]
	return ""
}
# Depth-first search for a circle from node u; stack holds the path.
function dfs(u,   v, i) {
	state[u] = 1
	stack[++depth] = u
	for (i = 1; i <= ncl; i++) {
		v = cl[i]
		if (!((u, v) in edge)) continue
		if (state[v] == 1) { report_cycle(v); return 1 }
		if (state[v] == 0 && dfs(v)) return 1
	}
	state[u] = 2
	depth--
	return 0
}
function report_cycle(v,   i, start, s) {
	for (i = 1; i <= depth; i++) if (stack[i] == v) start = i
	s = ""
	for (i = start; i <= depth; i++) s = s stack[i] " -> "
	printf "layers: the layers include each other in a circle: %s%s\n", s, v
	for (i = start; i <= depth; i++)
		printf "layers:   %s -> %s: %s\n", stack[i], (i < depth ? stack[i + 1] : v),
		    edge[stack[i], (i < depth ? stack[i + 1] : v)]
}
BEGIN {
	n = split(ENVIRON["FILES"], fl, "\n")
	for (i = 1; i <= n; i++) if (fl[i] != "") have[fl[i]] = 1
	nr = 0
	n = split(ENVIRON["RULES"], rl, "\n")
	for (i = 1; i <= n; i++) {
		if (trim(rl[i]) == "" || substr(trim(rl[i]), 1, 1) == "#") continue
		if (split(rl[i], f, "|") != 3) {
			printf "layers: malformed rule (FROM | TO | why): %s\n", rl[i]
			bad = 1
			continue
		}
		nr++
		rfrom[nr] = trim(f[1]); rto[nr] = trim(f[2]); rwhy[nr] = trim(f[3])
	}
	n = split(ENVIRON["ALLOWED"], al, "\n")
	for (i = 1; i <= n; i++) {
		if (trim(al[i]) == "") continue
		split(trim(al[i]), f, /[ \t]+/)
		allowed[f[1], f[2]] = 1
		allowed_order[++nal] = f[1] SUBSEP f[2]
	}
	ncl = split(ENVIRON["CYCLE"], cl, /[ \t]+/)

	n = split(ENVIRON["INCS"], il, "\n")
	nincs = 0
	for (i = 1; i <= n; i++) {
		line = il[i]
		if (line == "") continue
		# file:line:#include "x"
		c1 = index(line, ":"); src = substr(line, 1, c1 - 1); rest = substr(line, c1 + 1)
		c2 = index(rest, ":"); ln = substr(rest, 1, c2 - 1); text = substr(rest, c2 + 1)
		q1 = index(text, "\""); inc = substr(text, q1 + 1)
		inc = substr(inc, 1, index(inc, "\"") - 1)
		# as the compiler looks: beside the including file, then under daemon/ (-Idaemon);
		# anything else (proto/, gpu/, the generated headers) is outside the layers
		dir = src; sub(/[^\/]*$/, "", dir)
		if (norm(dir inc) in have) tgt = norm(dir inc)
		else if (norm(inc) in have) tgt = norm(inc)
		else continue
		nincs++
		for (r = 1; r <= nr; r++) {
			if (!match_list(src, rfrom[r]) || !match_list(tgt, rto[r])) continue
			if ((src, tgt) in allowed) {
				used[src, tgt] = 1
				continue
			}
			printf "layers: daemon/%s:%s includes \"%s\" (daemon/%s), which \"%s | %s\" forbids: %s\n",
			    src, ln, inc, tgt, rfrom[r], rto[r], rwhy[r]
			bad = 1
		}
		a = cycle_layer(src); b = cycle_layer(tgt)
		if (a != "" && b != "" && a != b && !((a, b) in edge))
			edge[a, b] = "daemon/" src ":" ln " includes \"" inc "\""
	}
	for (i = 1; i <= nal; i++) {
		if (allowed_order[i] in used) continue
		split(allowed_order[i], f, SUBSEP)
		printf "layers: ALLOWED lists %s -> %s, which no rule forbids or the code no longer has: remove the line (mk/layers.sh)\n", f[1], f[2]
		bad = 1
	}
	for (i = 1; i <= ncl; i++) state[cl[i]] = 0
	depth = 0
	for (i = 1; i <= ncl; i++)
		if (state[cl[i]] == 0 && dfs(cl[i])) { bad = 1; break }
	if (bad) exit 1
	nused = 0
	for (k in used) nused++
	printf "layers: ok (%d includes within daemon/, %d rules, %d listed in ALLOWED)\n", nincs, nr, nused
}'

# The link: main.c defines nothing that the daemon's internals use (build/ as `make` left
# it; the unit runner, which links libscd.a without main.o, could not link otherwise).
obj=build/obj/daemon/main.o lib=build/lib/libscd.a
if [ -f "$obj" ] && [ -f "$lib" ] && command -v nm >/dev/null 2>&1; then
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-layers.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	nm -g --defined-only "$obj" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/main"
	nm -u "$lib" 2>/dev/null | awk 'NF { print $NF }' | sort -u >"$tmp/lib"
	up=$(comm -12 "$tmp/main" "$tmp/lib" | tr '\n' ' ')
	if [ -n "$up" ]; then
		echo "layers: $lib uses what daemon/main.c defines ($up): pass it through a" \
			"hook main.c gives instead"
		exit 1
	fi
	echo "layers: ok ($lib uses nothing daemon/main.c defines)"
else
	echo "layers: the link is not checked: $obj or $lib is not built (make builds them)"
fi
