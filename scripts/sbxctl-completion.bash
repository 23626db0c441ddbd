# bash completion for sbxctl: commands, their options, and the ids of the
# sandboxes sbxctl remembers (its tokens file).
#   source scripts/sbxctl-completion.bash
_sbxctl_ids() {
  local f="${XDG_STATE_HOME:-$HOME/.local/state}/sbxctl/tokens.json"
  [ -r "$f" ] && grep -o '"sb_[0-9a-f]*"' "$f" | tr -d '"'
}

_sbxctl() {
  local cur prev cmd i
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  local commands="claim exec shell release renew ls info cp cat put ps kill logs session pools drain uncordon local git lsp"
  local globals="--addr --token --json --help --version"

  cmd=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
      --addr|--token) ((i++)) ;;
      -*) ;;
      *) cmd="${COMP_WORDS[i]}"; break ;;
    esac
  done

  case "$prev" in
    --size) COMPREPLY=($(compgen -W "small medium large" -- "$cur")); return ;;
    --addr|--token|--ttl|--ref|--cwd|--env|--user|--session|--signal|--mode|--id) return ;;
    --message|-m|--author|--branch|--depth|--auth-env|--root) return ;;
    --net) COMPREPLY=($(compgen -W "none egress" -- "$cur")); return ;;
  esac

  if [ -z "$cmd" ]; then
    COMPREPLY=($(compgen -W "$commands $globals" -- "$cur"))
    return
  fi

  local opts="--help --json --addr --token"
  case "$cmd" in
    claim) opts="$opts --size --net --ttl --ref" ;;
    exec) opts="$opts --cwd --env --user --session --no-stdin --" ;;
    shell) opts="$opts --cwd --env --user" ;;
    renew) opts="$opts --ttl" ;;
    ls) opts="$opts --ref" ;;
    put) opts="$opts --mode" ;;
    kill) opts="$opts --signal" ;;
    logs) opts="$opts --follow" ;;
    session) opts="$opts --id --cwd --env list create rm" ;;
    pools) opts="$opts show set" ;;
    local) opts="run" ;;
    git) opts="$opts --message --author --branch --depth --auth-env status add commit clone push pull branch" ;;
    lsp) opts="$opts --root" ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    return
  fi
  case "$cmd" in
    cp|cat|put)
      # ID:/path on the sandbox side, local files otherwise
      COMPREPLY=($(compgen -W "$(_sbxctl_ids | sed 's/$/:/')" -- "$cur") $(compgen -f -- "$cur"))
      compopt -o nospace 2>/dev/null
      ;;
    exec|shell|release|renew|info|ps|kill|logs|session|git|lsp)
      COMPREPLY=($(compgen -W "$(_sbxctl_ids) $opts" -- "$cur"))
      ;;
    *) COMPREPLY=($(compgen -W "$opts" -- "$cur")) ;;
  esac
}
complete -F _sbxctl sbxctl
