/* shellword.h — command lines as a POSIX shell reads them back. */
#ifndef ST_CORE_SHELLWORD_H
#define ST_CORE_SHELLWORD_H

#include <stddef.h>

/* Appends w to the NUL-terminated buf (after a space unless buf is empty), in single quotes when it
 * is empty or holds a character outside [A-Za-z0-9_@%+=:,./-] (a ' as '\''), so that the line runs
 * again as given: sweep's run commands, the manifest's and the start record's command. Truncated to
 * cap. */
void shell_word_append(char *buf, size_t cap, const char *w);

#endif
