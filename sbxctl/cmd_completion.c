/* sbxctl completion bash|zsh|fish: print a completion script for the shell.
 *
 * The script is generated from the command table (sbxctl_cmds) so that a new
 * verb, option or sub-command appears in every shell without another edit:
 * each command's usage line is read for its options (`--size SIZE`,
 * `--net none|egress`, `[--follow]`), sub-commands (bare lowercase words such
 * as `show`, `set`) and operands (`ID` is a sandbox id, `ID:/path` a sandbox
 * path or a local file). Sandbox ids are completed at run time from the
 * tokens file sbxctl keeps (remote_state.c). The packages install the three
 * outputs; this command is their one source. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <sandbox/sandbox.h>

#include "remote.h"

#define COMP_MAX_OPTS 24
#define COMP_MAX_SUBS 8
#define COMP_MAX_CMDS 64

typedef struct comp_copt {
  char name[32];  /* "--size" */
  char value[64]; /* "" for a flag, else its placeholder or "a|b" choices */
} comp_copt;

typedef struct comp_cspec {
  const char *name;
  char summary[160]; /* the help's first sentence */
  comp_copt opts[COMP_MAX_OPTS];
  size_t nopts;
  char subs[COMP_MAX_SUBS][24];
  size_t nsubs;
  bool ids;   /* an operand is a sandbox ID */
  bool paths; /* an operand is ID:/path or a local file */
} comp_cspec;

/* Dispatched by main.c rather than the table; described here in the table's
 * form so that they complete like the others. Skipped once the table has
 * them. */
static const rcmd comp_extra_cmds[] = {
    {"local", NULL, "run [--template TEMPLATE] [--size SIZE] [--driver auto|jail|qemu] [--stdin] -- ARGV...",
     "Run a command in a fresh sandbox on this machine, without sandboxd."},
    {"mcp", NULL, "[--addr ADDR] [--token TOKEN] [--template TEMPLATE]",
     "Serve sandboxes to an agent as MCP tools on stdin/stdout."},
    {NULL, NULL, NULL, NULL},
};

static const char *const comp_global_opts[] = {"--addr", "--token", "--json", "--help", "--version", NULL};
static const char *const comp_common_opts[] = {"--help", "--json", "--addr", "--token", NULL};
static const char *const comp_sizes = "small medium large xlarge 2xlarge";

/* ---- the model, from the usage lines ---- */

static void comp_add_opt(comp_cspec *c, const char *name, const char *value) {
  for (size_t i = 0; i < c->nopts; i++)
    if (strcmp(c->opts[i].name, name) == 0) return;
  if (c->nopts == COMP_MAX_OPTS) return;
  snprintf(c->opts[c->nopts].name, sizeof c->opts[0].name, "%s", name);
  snprintf(c->opts[c->nopts].value, sizeof c->opts[0].value, "%s", value ? value : "");
  c->nopts++;
}

static void comp_add_sub(comp_cspec *c, const char *w) {
  for (size_t i = 0; i < c->nsubs; i++)
    if (strcmp(c->subs[i], w) == 0) return;
  if (c->nsubs < COMP_MAX_SUBS) snprintf(c->subs[c->nsubs++], sizeof c->subs[0], "%s", w);
}

/* A usage token without its brackets and trailing "...". */
static void comp_strip(const char *tok, char *out, size_t cap) {
  while (*tok == '[') tok++;
  snprintf(out, cap, "%s", tok);
  size_t n = strlen(out);
  while (n && (out[n - 1] == ']' || out[n - 1] == '.')) out[--n] = '\0';
}

static bool comp_is_word(const char *s) {
  if (!islower((unsigned char)*s)) return false;
  for (; *s; s++)
    if (!islower((unsigned char)*s) && *s != '-') return false;
  return true;
}

static void comp_parse_usage(comp_cspec *c, const char *args) {
  char buf[512], *save = NULL;
  snprintf(buf, sizeof buf, "%s", args ? args : "");
  char *toks[64];
  size_t n = 0;
  for (char *t = strtok_r(buf, " ", &save); t && n < 64; t = strtok_r(NULL, " ", &save)) toks[n++] = t;
  for (size_t i = 0; i < n; i++) {
    char s[128], next[128] = "";
    comp_strip(toks[i], s, sizeof s);
    if (i + 1 < n) comp_strip(toks[i + 1], next, sizeof next);
    if (strncmp(s, "--", 2) == 0 && s[2]) {
      char *eq = strchr(s, '=');
      if (eq) *eq = '\0';
      /* "[--flag]" closes its group; "[--opt VALUE]" takes the next token */
      bool takes = !strchr(toks[i], ']') && next[0] && next[0] != '-' && next[0] != '|';
      comp_add_opt(c, s, takes ? next : NULL);
      if (takes) i++;
    } else if (strcmp(s, "ID") == 0) {
      c->ids = true;
    } else if (strstr(s, "ID:/") || strcmp(s, "SRC") == 0 || strcmp(s, "DST") == 0) {
      c->paths = true;
    } else {
      char *alt_save = NULL; /* "show", or "bash|zsh|fish": one or more literal words */
      for (char *w = strtok_r(s, "|", &alt_save); w; w = strtok_r(NULL, "|", &alt_save))
        if (comp_is_word(w)) comp_add_sub(c, w);
    }
  }
}

static void comp_summarize(comp_cspec *c, const char *help) {
  snprintf(c->summary, sizeof c->summary, "%s", help ? help : "");
  char *dot = strstr(c->summary, ". ");
  if (dot) *dot = '\0';
  size_t n = strlen(c->summary);
  if (n && c->summary[n - 1] == '.') c->summary[n - 1] = '\0';
}

static bool comp_in_table(const char *name) {
  for (const rcmd *t = sbxctl_cmds; t->name; t++)
    if (strcmp(t->name, name) == 0) return true;
  return false;
}

static size_t comp_build_model(comp_cspec *out) {
  size_t n = 0;
  for (const rcmd *t = sbxctl_cmds; t->name && n < COMP_MAX_CMDS; t++, n++) {
    memset(&out[n], 0, sizeof out[n]);
    out[n].name = t->name;
    comp_summarize(&out[n], t->help);
    comp_parse_usage(&out[n], t->args);
    for (const char *const *o = comp_common_opts; *o; o++) comp_add_opt(&out[n], *o, NULL);
  }
  for (const rcmd *t = comp_extra_cmds; t->name && n < COMP_MAX_CMDS; t++) {
    if (comp_in_table(t->name)) continue;
    memset(&out[n], 0, sizeof out[n]);
    out[n].name = t->name;
    comp_summarize(&out[n], t->help);
    comp_parse_usage(&out[n], t->args);
    comp_add_opt(&out[n], "--help", NULL);
    n++;
  }
  return n;
}

/* The words an option's value completes to: its listed choices, the size
 * tiers, or nothing (free text: seconds, paths inside the sandbox, ...). */
static bool comp_value_words(const char *value, char *out, size_t cap) {
  if (strcmp(value, "SIZE") == 0) {
    snprintf(out, cap, "%s", comp_sizes);
    return true;
  }
  if (!strchr(value, '|')) return false;
  size_t k = 0;
  for (const char *p = value; *p && k + 1 < cap; p++) {
    if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '|' && *p != '-') return false;
    out[k++] = *p == '|' ? ' ' : *p;
  }
  out[k] = '\0';
  return true;
}

/* Every option that takes a value, once, with its words ("" = free text). */
typedef struct comp_valopt {
  const char *name;
  char words[128];
} comp_valopt;

static size_t comp_value_opts(const comp_cspec *cs, size_t n, comp_valopt *out, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < cs[i].nopts; j++) {
      const comp_copt *o = &cs[i].opts[j];
      if (!o->value[0] || strcmp(o->name, "--addr") == 0 || strcmp(o->name, "--token") == 0) continue;
      size_t m = 0;
      while (m < k && strcmp(out[m].name, o->name) != 0) m++;
      if (m < k || k == cap) continue;
      out[k].name = o->name;
      if (!comp_value_words(o->value, out[k].words, sizeof out[k].words)) out[k].words[0] = '\0';
      k++;
    }
  return k;
}

/* ---- emitters ---- */

static const char comp_ids_reader[] = "\"${XDG_STATE_HOME:-$HOME/.local/state}/sbxctl/tokens.json\"";

static void comp_print_opts(const comp_cspec *c, const char *sep) {
  for (size_t j = 0; j < c->nopts; j++) printf("%s%s", j ? sep : "", c->opts[j].name);
}

static void comp_print_subs(const comp_cspec *c) {
  for (size_t j = 0; j < c->nsubs; j++) printf("%s%s", j ? " " : "", c->subs[j]);
}

static void comp_emit_bash(const comp_cspec *cs, size_t n, const comp_valopt *vo, size_t nvo) {
  printf("# bash completion for sbxctl %s, generated by `sbxctl completion bash`.\n"
         "#   source <(sbxctl completion bash)\n"
         "_sbxctl_ids() {\n"
         "  local f=%s\n"
         "  [ -r \"$f\" ] && grep -o '\"sb_[0-9a-f]*\"' \"$f\" | tr -d '\"'\n"
         "}\n\n"
         "_sbxctl() {\n"
         "  local cur prev cmd i opts=\"\" subs=\"\" ids=0 paths=0\n"
         "  COMPREPLY=()\n"
         "  cur=\"${COMP_WORDS[COMP_CWORD]}\"\n"
         "  prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
         "  cmd=\"\"\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    case \"${COMP_WORDS[i]}\" in\n"
         "      --addr|--token) ((i++)) ;;\n"
         "      -*) ;;\n"
         "      *) cmd=\"${COMP_WORDS[i]}\"; break ;;\n"
         "    esac\n"
         "  done\n\n"
         "  case \"$prev\" in\n",
         sbx_version(), comp_ids_reader);
  for (size_t i = 0; i < nvo; i++)
    if (vo[i].words[0]) printf("    %s) COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")); return ;;\n", vo[i].name, vo[i].words);
  printf("    --addr|--token");
  for (size_t i = 0; i < nvo; i++)
    if (!vo[i].words[0]) printf("|%s", vo[i].name);
  printf(") return ;;\n  esac\n\n  if [ -z \"$cmd\" ]; then\n    COMPREPLY=($(compgen -W \"");
  for (size_t i = 0; i < n; i++) printf("%s ", cs[i].name);
  for (const char *const *g = comp_global_opts; *g; g++) printf("%s%s", *g, g[1] ? " " : "");
  printf("\" -- \"$cur\"))\n    return\n  fi\n\n  case \"$cmd\" in\n");
  for (size_t i = 0; i < n; i++) {
    printf("    %s) opts=\"", cs[i].name);
    comp_print_opts(&cs[i], " ");
    printf("\"; subs=\"");
    comp_print_subs(&cs[i]);
    printf("\"; ids=%d; paths=%d ;;\n", cs[i].ids, cs[i].paths);
  }
  printf("    *) return ;;\n"
         "  esac\n"
         "  if [[ \"$cur\" == -* ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
         "  elif [ \"$paths\" = 1 ]; then\n"
         "    # ID:/path on the sandbox side, local files otherwise\n"
         "    COMPREPLY=($(compgen -W \"$(_sbxctl_ids | sed 's/$/:/')\" -- \"$cur\") $(compgen -f -- \"$cur\"))\n"
         "    compopt -o nospace 2>/dev/null\n"
         "  else\n"
         "    [ \"$ids\" = 1 ] && subs=\"$subs $(_sbxctl_ids)\"\n"
         "    COMPREPLY=($(compgen -W \"$subs\" -- \"$cur\"))\n"
         "  fi\n"
         "}\n"
         "complete -F _sbxctl sbxctl\n");
}

/* Inside a single-quoted shell word: ' becomes '\'' (bash, zsh) or \' (fish). */
static void comp_put_quoted(const char *s, bool fish, bool zsh_describe) {
  for (; *s; s++) {
    if (*s == '\'') fputs(fish ? "\\'" : "'\\''", stdout);
    else if (*s == '\\' && fish) fputs("\\\\", stdout);
    else if (*s == ':' && zsh_describe) fputs("\\:", stdout);
    else putchar(*s);
  }
}

static void comp_emit_zsh(const comp_cspec *cs, size_t n, const comp_valopt *vo, size_t nvo) {
  printf("#compdef sbxctl\n"
         "# zsh completion for sbxctl %s, generated by `sbxctl completion zsh`.\n"
         "#   source <(sbxctl completion zsh)   or as _sbxctl in $fpath\n"
         "_sbxctl_ids() {\n"
         "  local f=%s\n"
         "  [[ -r $f ]] && grep -o '\"sb_[0-9a-f]*\"' $f | tr -d '\"'\n"
         "}\n\n"
         "_sbxctl() {\n"
         "  local -a cmds opts subs idl\n"
         "  local cmd i ids=0 paths=0\n"
         "  cmds=(\n",
         sbx_version(), comp_ids_reader);
  for (size_t i = 0; i < n; i++) {
    printf("    '%s:", cs[i].name);
    comp_put_quoted(cs[i].summary, false, true);
    printf("'\n");
  }
  printf("  )\n"
         "  for ((i = 2; i < CURRENT; i++)); do\n"
         "    case $words[i] in\n"
         "      --addr|--token) ((i++)) ;;\n"
         "      -*) ;;\n"
         "      *) cmd=$words[i]; break ;;\n"
         "    esac\n"
         "  done\n"
         "  case $words[CURRENT-1] in\n");
  for (size_t i = 0; i < nvo; i++)
    if (vo[i].words[0]) printf("    %s) compadd -- %s; return ;;\n", vo[i].name, vo[i].words);
  printf("    --addr|--token");
  for (size_t i = 0; i < nvo; i++)
    if (!vo[i].words[0]) printf("|%s", vo[i].name);
  printf(") return ;;\n"
         "  esac\n"
         "  if [[ -z $cmd ]]; then\n"
         "    if [[ $PREFIX == -* ]]; then compadd -- ");
  for (const char *const *g = comp_global_opts; *g; g++) printf("%s%s", *g, g[1] ? " " : "");
  printf("; else _describe -t commands 'sbxctl command' cmds; fi\n"
         "    return\n"
         "  fi\n"
         "  case $cmd in\n");
  for (size_t i = 0; i < n; i++) {
    printf("    %s) opts=(", cs[i].name);
    comp_print_opts(&cs[i], " ");
    printf("); subs=(");
    comp_print_subs(&cs[i]);
    printf("); ids=%d; paths=%d ;;\n", cs[i].ids, cs[i].paths);
  }
  printf("    *) return ;;\n"
         "  esac\n"
         "  if [[ $PREFIX == -* ]]; then compadd -- $opts; return; fi\n"
         "  idl=(${(f)\"$(_sbxctl_ids)\"})\n"
         "  if (( paths )); then\n"
         "    (( $#idl )) && compadd -S '' -- ${^idl}:\n"
         "    _files\n"
         "    return\n"
         "  fi\n"
         "  (( ids && $#idl )) && compadd -- $idl\n"
         "  (( $#subs )) && compadd -- $subs\n"
         "  return 0\n"
         "}\n\n"
         "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then _sbxctl \"$@\"; else compdef _sbxctl sbxctl; fi\n");
}

static void comp_emit_fish(const comp_cspec *cs, size_t n) {
  printf("# fish completion for sbxctl %s, generated by `sbxctl completion fish`.\n"
         "#   sbxctl completion fish | source\n"
         "function __sbxctl_ids\n"
         "    set -l dir $HOME/.local/state\n"
         "    set -q XDG_STATE_HOME; and set dir $XDG_STATE_HOME\n"
         "    test -r $dir/sbxctl/tokens.json; and grep -o '\"sb_[0-9a-f]*\"' $dir/sbxctl/tokens.json | tr -d '\"'\n"
         "end\n"
         "# The command word, if one is typed yet (after the global options).\n"
         "function __sbxctl_cmd\n"
         "    set -l words (commandline -opc)\n"
         "    set -e words[1]\n"
         "    set -l skip 0\n"
         "    for w in $words\n"
         "        if test $skip = 1\n"
         "            set skip 0\n"
         "            continue\n"
         "        end\n"
         "        switch $w\n"
         "            case --addr --token\n"
         "                set skip 1\n"
         "            case '-*'\n"
         "            case '*'\n"
         "                echo $w\n"
         "                return 0\n"
         "        end\n"
         "    end\n"
         "    return 1\n"
         "end\n"
         "function __sbxctl_using\n"
         "    set -l c (__sbxctl_cmd); and test \"$c\" = \"$argv[1]\"\n"
         "end\n\n"
         "complete -c sbxctl -f\n",
         sbx_version());
  for (const char *const *g = comp_global_opts; *g; g++)
    printf("complete -c sbxctl -n 'not __sbxctl_cmd' -l %s%s\n", *g + 2,
           strcmp(*g, "--addr") == 0 || strcmp(*g, "--token") == 0 ? " -x" : "");
  for (size_t i = 0; i < n; i++) {
    printf("complete -c sbxctl -n 'not __sbxctl_cmd' -a %s -d '", cs[i].name);
    comp_put_quoted(cs[i].summary, true, false);
    printf("'\n");
  }
  for (size_t i = 0; i < n; i++) {
    const comp_cspec *c = &cs[i];
    for (size_t j = 0; j < c->nopts; j++) {
      char words[128];
      printf("complete -c sbxctl -n '__sbxctl_using %s' -l %s", c->name, c->opts[j].name + 2);
      if (c->opts[j].value[0] && comp_value_words(c->opts[j].value, words, sizeof words)) printf(" -x -a '%s'", words);
      else if (c->opts[j].value[0]) printf(" -x");
      printf("\n");
    }
    if (c->nsubs) {
      printf("complete -c sbxctl -n '__sbxctl_using %s' -a '", c->name);
      comp_print_subs(c);
      printf("'\n");
    }
    if (c->paths) printf("complete -c sbxctl -n '__sbxctl_using %s' -F -a '(__sbxctl_ids | sed \"s/\\$/:/\")'\n", c->name);
    else if (c->ids) printf("complete -c sbxctl -n '__sbxctl_using %s' -a '(__sbxctl_ids)'\n", c->name);
  }
}

int cmd_completion(rctx *r, int argc, char **argv) {
  (void)r;
  if (argc >= 2 && is_help(argv[1])) return rhelp("completion");
  if (argc != 2) return rusage("completion");
  static comp_cspec cs[COMP_MAX_CMDS];
  comp_valopt vo[COMP_MAX_CMDS];
  size_t n = comp_build_model(cs);
  size_t nvo = comp_value_opts(cs, n, vo, COMP_MAX_CMDS);
  if (strcmp(argv[1], "bash") == 0) comp_emit_bash(cs, n, vo, nvo);
  else if (strcmp(argv[1], "zsh") == 0) comp_emit_zsh(cs, n, vo, nvo);
  else if (strcmp(argv[1], "fish") == 0) comp_emit_fish(cs, n);
  else {
    fprintf(stderr, "sbxctl: completion: unknown shell \"%s\" (expected bash, zsh or fish)\n", argv[1]);
    return EXIT_USAGE;
  }
  return fflush(stdout) == 0 ? 0 : rfail("completion: write: stdout");
}
