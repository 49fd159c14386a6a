// commands.h - entry points of the `kda <command>` subcommands; main.c dispatches to them.
// Each returns the process exit status. argv[0] is the first flag (not the command name).
#ifndef KDA_COMMANDS_H
#define KDA_COMMANDS_H

int cmd_info(int argc, char **argv);         // src/cli/cmd_info.c
int cmd_score(int argc, char **argv);        // src/cli/cmd_score.c
int cmd_tokenize(int argc, char **argv);     // src/cli/cmd_tokenize.c
int cmd_dataset_info(int argc, char **argv); // src/cli/cmd_tokenize.c
int cmd_encode(int argc, char **argv);       // src/cli/cmd_encode.c
int cmd_decode(int argc, char **argv);       // src/cli/cmd_encode.c
int cmd_train(int argc, char **argv);        // src/cli/cmd_train.c
int cmd_export(int argc, char **argv);       // src/cli/cmd_export.c
int cmd_plot(int argc, char **argv);         // src/cli/cmd_plot.c
int cmd_compare(int argc, char **argv);      // src/cli/cmd_compare.c
int cmd_generate(int argc, char **argv);     // src/cli/cmd_generate.c
int cmd_eval(int argc, char **argv);         // src/cli/cmd_eval.c

#endif
