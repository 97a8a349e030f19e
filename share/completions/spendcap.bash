# bash completion for spendcap(1): subcommands, and the flags of each. Installed as
# share/bash-completion/completions/spendcap. After `--`, `spendcap run` completes the command.
# Written by `spendcap help --completion` from the parser's own tree (cli/completion.hpp): do not
# edit; tests/integration/test_packaging.py checks that this file is that text.
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
    --policy|--status-file|--ledger|--log) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return 0 ;;
    --metrics-dir|--checkpoint-dir|--man-dir) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return 0 ;;
    --billing) mapfile -t COMPREPLY < <(compgen -W "allocated measured" -- "$cur"); return 0 ;;
    --mode) mapfile -t COMPREPLY < <(compgen -W "enforce warn" -- "$cur"); return 0 ;;
    --pricing) mapfile -t COMPREPLY < <(compgen -W "on-demand spot reserved" -- "$cur"); return 0 ;;
    --isolation) mapfile -t COMPREPLY < <(compgen -W "pid none" -- "$cur"); return 0 ;;
    --spot-notice) mapfile -t COMPREPLY < <(compgen -W "aws gcp http://" -- "$cur"); return 0 ;;
    --checkpoint-signal) mapfile -t COMPREPLY < <(compgen -W "SIGUSR1 SIGUSR2 SIGINT SIGTERM none" -- "$cur"); return 0 ;;
    --forward) mapfile -t COMPREPLY < <(compgen -W "SIGUSR1 SIGUSR2 SIGHUP SIGINT SIGCONT SIGWINCH" -- "$cur"); return 0 ;;
    --webhook-env) mapfile -t COMPREPLY < <(compgen -v -- "$cur"); return 0 ;;
    --format) mapfile -t COMPREPLY < <(compgen -W "table csv json focus html" -- "$cur"); return 0 ;;
    --status) mapfile -t COMPREPLY < <(compgen -W "running succeeded failed killed refused lost preempted" -- "$cur"); return 0 ;;
    --by) mapfile -t COMPREPLY < <(compgen -W "team experiment project user host day tag:" -- "$cur"); return 0 ;;
    --metric-goal) mapfile -t COMPREPLY < <(compgen -W "max min" -- "$cur"); return 0 ;;
  esac

  local options
  case $subcommand in
    "") options="run policy budgets ps stop outbox notify ledger show runs estimate report accept help --help --version" ;;
    run) options="--team --experiment --project --tag --job-key --run-id --rate --budget --gpu --gpus --instance --instances --pricing --billing --mode --checkpoint-signal --grace --kill-after --interval --sync --claim-horizon --isolation --stall-after --require-fit --retry-backoff --clear-crash-loop --dry-run --status-file --metrics-dir --checkpoint-dir --checkpoint-max-gb --policy --ledger --webhook-env --webhook --quiet --verbose --title --spot-notice --spot-notice-url --log --exit-window --forward --estimate-steps --step-time --help --" ;;
    policy) case $sub2 in
        check) options="--help"; [[ $cur != -* ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return 0; } ;;
        keys) options="--help" ;;
        *) options="check keys --help" ;;
      esac ;;
    budgets) case $sub2 in
        apply) options="--help"; [[ $cur != -* ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return 0; } ;;
        *) options="apply --policy --ledger --json --help" ;;
      esac ;;
    ps) options="--policy --ledger --json --help" ;;
    stop) options="--policy --ledger --team --experiment --project --user --run --job --reason --clear --list --help" ;;
    outbox) case $sub2 in
        list) options="--policy --ledger --json --help" ;;
        flush) options="--policy --ledger --help" ;;
        *) options="list flush --help" ;;
      esac ;;
    notify) case $sub2 in
        test) options="--policy --webhook-env --webhook --help" ;;
        *) options="test --help" ;;
      esac ;;
    ledger) case $sub2 in
        copy) options="--help"; [[ $cur != -* ]] && { mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return 0; } ;;
        *) options="copy --help" ;;
      esac ;;
    show) options="--policy --ledger --json --help" ;;
    runs) options="--policy --ledger --since --until --team --experiment --user --status --limit --json --format --help" ;;
    estimate) options="--policy --ledger --step-time --steps --gpu-hours --params --tokens --peak-tflops --mfu --rate --gpu --gpus --instance --instances --pricing --interruptions-per-100h --lost-per-interruption --team --experiment --compare --bytes-per-param --activations-gb --serving --price-per-hour --rps --utilisation --predictions-per-day --reserved --on-demand --json --help" ;;
    report) options="--policy --ledger --by --since --until --team --experiment --format --baseline --metric --metric-goal --csv-raw --help" ;;
    accept) options="--policy --ledger --note --help" ;;
    help) options="--man --options --man-dir --completion --help run policy budgets ps stop outbox notify ledger show runs estimate report accept help policy-file" ;;
    *) options="" ;;
  esac
  mapfile -t COMPREPLY < <(compgen -W "$options" -- "$cur")
}
complete -F _spendcap spendcap
