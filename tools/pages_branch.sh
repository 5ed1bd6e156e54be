#!/usr/bin/env bash
# Write the GitHub Pages branch that serves the book (gh-pages; Settings > Pages > Source: "Deploy
# from a branch", gh-pages, / (root)): the published book at its root and the book of each open
# pull request under _preview/<number>/. The workflows call it:
#   tools/pages_branch.sh site DIR          DIR becomes the site's root (every _preview/ folder is kept)
#   tools/pages_branch.sh preview N DIR     DIR becomes _preview/N/ (everything else is kept)
#   tools/pages_branch.sh remove N          _preview/N/ is removed (nothing to do when it is absent)
# $PAGES_REMOTE is the repository to push to (a URL or a path); $PAGES_BRANCH the branch (gh-pages).
#
# The branch holds one commit, the site as it is now (no history of old builds to grow the
# repository). Each change is made on the branch as just fetched and pushed with
# --force-with-lease on the commit it was made on: when another run (the publish workflow, the
# preview of another pull request) pushed in between, the push is refused and the change is made
# again on the new branch, so runs at the same time never undo each other's changes.
set -euo pipefail

usage() {
	sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

remote=${PAGES_REMOTE:?set PAGES_REMOTE to the repository to push the Pages branch to}
branch=${PAGES_BRANCH:-gh-pages}
action=${1:-}
case "$action" in
site)
	[[ $# -eq 2 && -d $2 ]] || usage
	src=$(realpath "$2")
	message="the book"
	;;
preview)
	[[ $# -eq 3 && $2 =~ ^[1-9][0-9]*$ && -d $3 ]] || usage
	src=$(realpath "$3")
	message="preview of pull request #$2"
	;;
remove)
	[[ $# -eq 2 && $2 =~ ^[1-9][0-9]*$ ]] || usage
	message="preview of pull request #$2 removed"
	;;
*) usage ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_DIR=$work/git GIT_INDEX_FILE=$work/index
git init --quiet --bare "$GIT_DIR"
export GIT_AUTHOR_NAME="github-actions[bot]" GIT_COMMITTER_NAME="github-actions[bot]"
export GIT_AUTHOR_EMAIL="41898282+github-actions[bot]@users.noreply.github.com"
export GIT_COMMITTER_EMAIL=$GIT_AUTHOR_EMAIL

for attempt in 1 2 3 4 5 6; do
	tree=$work/tree
	rm -rf "$tree" "$GIT_INDEX_FILE"
	mkdir "$tree"
	# the branch as it is now; no branch yet: an empty site, and the push must create it
	lease=""
	if git fetch --quiet --depth 1 "$remote" "refs/heads/$branch" 2>/dev/null; then
		lease=$(git rev-parse FETCH_HEAD)
		git archive FETCH_HEAD | tar -x -C "$tree"
	fi
	case "$action" in
	site)
		find "$tree" -mindepth 1 -maxdepth 1 ! -name _preview -exec rm -rf {} +
		cp -a "$src/." "$tree/"
		;;
	preview)
		rm -rf "$tree/_preview/$2"
		mkdir -p "$tree/_preview/$2"
		cp -a "$src/." "$tree/_preview/$2/"
		;;
	remove)
		if [[ ! -e $tree/_preview/$2 ]]; then
			echo "no preview of pull request #$2 on $branch: nothing to remove"
			exit 0
		fi
		rm -rf "$tree/_preview/$2"
		;;
	esac
	# GitHub Pages must not run Jekyll, which drops folders starting with _ (_static, _preview)
	touch "$tree/.nojekyll"
	git --work-tree="$tree" add --all
	commit=$(git commit-tree "$(git write-tree)" -m "$message")
	if git push --quiet --force-with-lease="refs/heads/$branch:$lease" "$remote" "$commit:refs/heads/$branch"; then
		echo "$branch: $message"
		exit 0
	fi
	echo "$branch changed while writing it (attempt $attempt): writing it again" >&2
	sleep $((attempt + RANDOM % 3))
done
echo "error: could not write $branch: it kept changing (or the push is refused)" >&2
exit 1
