# bash completion for osprey (installed as
# share/bash-completion/completions/osprey; or `source` this file).
# Completes the subcommands, each one's flags, the values of the flags
# that take a fixed set, and file names where a flag takes a file.
# tests/osprey-cli-test.sh checks these lists against `osprey SUB --help`.

_osprey() {
  local cur prev sub i
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  local subcommands="call list describe"
  local common="-h --help --proto -I --import_path --timeout --rpc_encryption \
--rpc_encrypt_loopback_connections --tls_ca_file --user"
  local call_flags="-d --data --sidecar --save_sidecars --repeat --format"

  sub=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
      call | list | describe)
        sub="${COMP_WORDS[i]}"
        break
        ;;
    esac
  done

  if [[ -z "$sub" ]]; then
    COMPREPLY=($(compgen -W "$subcommands --help --version" -- "$cur"))
    return 0
  fi

  case "$prev" in
    --rpc_encryption)
      COMPREPLY=($(compgen -W "disabled optional required" -- "$cur"))
      return 0
      ;;
    --format)
      COMPREPLY=($(compgen -W "json text" -- "$cur"))
      return 0
      ;;
    --proto | --tls_ca_file | --sidecar)
      COMPREPLY=($(compgen -f -- "$cur"))
      return 0
      ;;
    -I | --import_path | --save_sidecars)
      COMPREPLY=($(compgen -d -- "$cur"))
      return 0
      ;;
    -d | --data | --timeout | --repeat | --user)
      return 0
      ;;
  esac

  if [[ "$cur" == -* ]]; then
    local flags="$common"
    [[ "$sub" == call ]] && flags="$common $call_flags"
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  fi
  return 0
}
complete -F _osprey osprey
