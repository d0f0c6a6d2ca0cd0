/* mem.h — aligned buffers that belong to a memory category.
 *
 * Every long-lived buffer of a run is allocated through a MemStats owned by that run (no global),
 * so the trainer can log measured bytes per category beside the planned ones. */
#ifndef ST_CORE_MEM_H
#define ST_CORE_MEM_H

#include <stddef.h>

typedef enum {
    MEM_PARAMS,
    MEM_GRADS,
    MEM_MASTER,
    MEM_MOMENTS,
    MEM_ACTIVATIONS,
    MEM_WORKSPACE,
    MEM_COMM,
    MEM_CKPT_STAGING,
    MEM_DATA,
    MEM_NCAT
} MemCategory;

typedef struct {
    size_t bytes[MEM_NCAT]; /* currently allocated bytes per category */
    size_t peak[MEM_NCAT];  /* high-water mark per category */
} MemStats;

const char *mem_category_name(MemCategory c);

/* 64-byte aligned, zero-filled; NULL on failure (caller reports). n may be 0 (returns NULL). */
void *mem_alloc(MemStats *ms, MemCategory c, size_t bytes);
/* Frees a buffer from mem_alloc with the same size and category; safe on NULL. */
void mem_free(MemStats *ms, MemCategory c, void *p, size_t bytes);

/* The process's resident anonymous memory (RssAnon of /proc/self/status) in bytes; 0 if unknown. */
size_t mem_rss_anon(void);

#endif
