/* shellword.c — command lines as a POSIX shell reads them back (see shellword.h). */
#include "core/shellword.h"

#include <stdio.h>
#include <string.h>

void shell_word_append(char *buf, size_t cap, const char *w) {
    size_t k = strlen(buf);
    int safe = w[0] != '\0';
    for (const char *p = w; *p; p++)
        safe &= (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("-_./=:,+@%", *p) != NULL;
    if (safe) {
        snprintf(buf + k, cap - k, "%s%s", k ? " " : "", w);
        return;
    }
    k += (size_t)snprintf(buf + k, cap - k, "%s'", k ? " " : "");
    for (const char *p = w; *p && k + 5 < cap; p++) {
        if (*p == '\'') k += (size_t)snprintf(buf + k, cap - k, "'\\''");
        else buf[k++] = *p, buf[k] = '\0';
    }
    if (k + 1 < cap) buf[k++] = '\'', buf[k] = '\0';
}
