# bash completion for spendcap(1): subcommands, and the flags of each. Installed as
# share/bash-completion/completions/spendcap. After `--`, `spendcap run` completes the command.
_spendcap() {
  local cur prev words cword
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  words=("${COMP_WORDS[@]}")
  cword=$COMP_CWORD

  local subcommand="" sub2="" i
  for ((i = 1; i < cword; i++)); do
    case ${words[i]} in
      --) # the command being wrapped: complete it as a command of its own
        if [[ $subcommand == run ]]; then
          if ((cword == i + 1)); then
            mapfile -t COMPREPLY < <(compgen -c -- "$cur")
          else
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
          fi
          return 0
        fi ;;
      -*) ;;
      *) if [[ -z $subcommand ]]; then subcommand=${words[i]}; elif [[ -z $sub2 ]]; then sub2=${words[i]}; fi ;;
    esac
  done

  case $prev in
    --policy|--status-file|--ledger) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return 0 ;;
    --mode) mapfile -t COMPREPLY < <(compgen -W "enforce warn" -- "$cur"); return 0 ;;
    --pricing) mapfile -t COMPREPLY < <(compgen -W "on-demand spot reserved" -- "$cur"); return 0 ;;
    --isolation) mapfile -t COMPREPLY < <(compgen -W "pid none" -- "$cur"); return 0 ;;
    --spot-notice) mapfile -t COMPREPLY < <(compgen -W "aws gcp http://" -- "$cur"); return 0 ;;
    --checkpoint-signal) mapfile -t COMPREPLY < <(compgen -W "SIGUSR1 SIGUSR2 SIGINT SIGTERM none" -- "$cur"); return 0 ;;
  esac

  local options
  case $subcommand in
    "") options="run policy budgets ps stop --help --version" ;;
    run) options="--team --experiment --project --tag --job-key --rate --budget --gpu --gpus
                  --instance --instances --pricing --mode --checkpoint-signal --grace --kill-after
                  --interval --sync --claim-horizon --isolation --status-file --policy --ledger
                  --spot-notice --spot-notice-url --quiet --title --help --" ;;
    policy) options="check --help"
            [[ $sub2 == check ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return 0; } ;;
    budgets) options="apply --json --policy --ledger --help"
             [[ $sub2 == apply ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return 0; } ;;
    ps) options="--json --policy --ledger --help" ;;
    stop) options="--team --experiment --project --user --run --reason --clear --policy --ledger --help" ;;
    *) options="" ;;
  esac
  mapfile -t COMPREPLY < <(compgen -W "$options" -- "$cur")
}
complete -F _spendcap spendcap
