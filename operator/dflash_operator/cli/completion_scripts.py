"""The scripts `kubectl dflash completion bash|zsh|fish` prints. Each asks the program itself
(`kubectl-dflash __complete ARGS... WORD`, see `completion.py`) and shows its answer, so the
scripts stay small and never go stale. Also the `kubectl_complete-dflash` shim for kubectl.
"""

from __future__ import annotations

BASH = r"""# bash completion for kubectl-dflash.
# Load it: source <(kubectl-dflash completion bash)   (or save it in your bash_completion.d)
_kubectl_dflash() {
    local cur=${COMP_WORDS[COMP_CWORD]} line directive
    local -a lines=()
    while IFS= read -r line; do
        lines+=("$line")
    done < <("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD-1}" "$cur" 2>/dev/null)
    (( ${#lines[@]} )) || return 0
    directive=${lines[${#lines[@]}-1]#:}
    unset "lines[${#lines[@]}-1]"
    COMPREPLY=()
    for line in "${lines[@]}"; do
        [[ -n $line ]] && COMPREPLY+=("${line%%$'\t'*}")
    done
    if (( directive & 2 )); then compopt -o nospace 2>/dev/null; fi
    if (( ${#COMPREPLY[@]} == 0 && (directive & 4) == 0 )); then
        compopt -o default 2>/dev/null
    fi
    return 0
}
complete -F _kubectl_dflash kubectl-dflash
"""

ZSH = r"""#compdef kubectl-dflash
# zsh completion for kubectl-dflash.
# Load it: source <(kubectl-dflash completion zsh)   (after compinit)
_kubectl_dflash() {
    local -a lines values
    local directive line
    lines=("${(@f)$(${words[1]} __complete "${(@)words[2,CURRENT-1]}" "${words[CURRENT]}" 2>/dev/null)}")
    (( ${#lines} )) || return 1
    directive=${lines[-1]#:}
    for line in "${(@)lines[1,-2]}"; do
        [[ -n $line ]] && values+=("${${line%%$'\t'*}//:/\\:}")
    done
    if (( ${#values} )); then
        if (( directive & 2 )); then
            _describe -t values 'kubectl-dflash' values -S ''
        else
            _describe -t values 'kubectl-dflash' values
        fi
    elif (( (directive & 4) == 0 )); then
        _files
    fi
}
compdef _kubectl_dflash kubectl-dflash
"""

FISH = r"""# fish completion for kubectl-dflash.
# Load it: kubectl-dflash completion fish | source
#   (or save it as ~/.config/fish/completions/kubectl-dflash.fish)
function __kubectl_dflash_complete
    set -l args (commandline -opc)
    set -l current (commandline -ct)
    set -l lines ($args[1] __complete $args[2..-1] "$current" 2>/dev/null)
    test (count $lines) -gt 0; or return
    set -l directive (string replace ':' '' -- $lines[-1])
    set -e lines[-1]
    if test (count $lines) -eq 0; and test (math "bitand($directive, 4)") -eq 0
        __fish_complete_path "$current"
        return
    end
    printf '%s\n' $lines
end
complete -c kubectl-dflash -f -a '(__kubectl_dflash_complete)'
"""

# kubectl >= 1.26 completes `kubectl dflash ...` by running this executable from PATH.
KUBECTL_COMPLETE_SHIM = """#!/bin/sh
# kubectl (>= 1.26) runs this to complete `kubectl dflash ...`: see docs/kubectl-plugin.md.
exec kubectl-dflash __complete "$@"
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}
