/*
 * itest_json.c: a small, strict JSON reader for checking sparsectl's --json output. The
 * tests look values up by key rather than by searching text, so a reordered or nested
 * field cannot make a check pass or fail by accident, and malformed output fails.
 */
#include "itest.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const char *p;
	char *err;
	size_t err_len;
	int failed;
} jp_t;

static it_json_t *parse_value(jp_t *j, int depth);

static void jfail(jp_t *j, const char *what)
{
	if (!j->failed && j->err_len)
		snprintf(j->err, j->err_len, "%s at '%.20s'", what, j->p);
	j->failed = 1;
}

static void skip_ws(jp_t *j)
{
	while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
		j->p++;
}

static it_json_t *new_node(jp_t *j, it_jtype_t type)
{
	it_json_t *v = calloc(1, sizeof(*v));
	if (!v)
		jfail(j, "out of memory");
	else
		v->type = type;
	return v;
}

static char *parse_string(jp_t *j)
{
	if (*j->p != '"') {
		jfail(j, "expected a string");
		return NULL;
	}
	j->p++;
	size_t cap = 32, n = 0;
	char *s = malloc(cap);
	while (s && *j->p && *j->p != '"') {
		char c = *j->p++;
		if (c == '\\') {
			char e = *j->p++;
			switch (e) {
			case 'n':
				c = '\n';
				break;
			case 't':
				c = '\t';
				break;
			case 'r':
				c = '\r';
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'u':
				/* Escaped code points are kept as '?': tests compare ASCII
				 * names. */
				for (int i = 0; i < 4; i++)
					if (!isxdigit((unsigned char)*j->p++)) {
						jfail(j, "bad \\u escape");
						free(s);
						return NULL;
					}
				c = '?';
				break;
			case '"':
			case '\\':
			case '/':
				c = e;
				break;
			default:
				jfail(j, "bad escape");
				free(s);
				return NULL;
			}
		} else if ((unsigned char)c < 0x20) {
			jfail(j, "control character in a string");
			free(s);
			return NULL;
		}
		if (n + 2 > cap) {
			cap *= 2;
			char *t = realloc(s, cap);
			if (!t) {
				free(s);
				s = NULL;
				break;
			}
			s = t;
		}
		s[n++] = c;
	}
	if (!s) {
		jfail(j, "out of memory");
		return NULL;
	}
	if (*j->p != '"') {
		jfail(j, "unterminated string");
		free(s);
		return NULL;
	}
	j->p++;
	s[n] = 0;
	return s;
}

static int push(jp_t *j, it_json_t *parent, char *key, it_json_t *item)
{
	it_json_t **items = realloc(parent->items, (parent->n + 1) * sizeof(*items));
	if (!items) {
		jfail(j, "out of memory");
		return -1;
	}
	parent->items = items;
	if (parent->type == IT_JOBJ) {
		char **keys = realloc(parent->keys, (parent->n + 1) * sizeof(*keys));
		if (!keys) {
			jfail(j, "out of memory");
			return -1;
		}
		parent->keys = keys;
		keys[parent->n] = key;
	}
	items[parent->n++] = item;
	return 0;
}

static it_json_t *parse_container(jp_t *j, int depth, int obj)
{
	it_json_t *v = new_node(j, obj ? IT_JOBJ : IT_JARR);
	if (!v)
		return NULL;
	j->p++;
	skip_ws(j);
	if (*j->p == (obj ? '}' : ']')) {
		j->p++;
		return v;
	}
	for (;;) {
		char *key = NULL;
		skip_ws(j);
		if (obj) {
			key = parse_string(j);
			if (!key)
				break;
			skip_ws(j);
			if (*j->p != ':') {
				jfail(j, "expected ':'");
				free(key);
				break;
			}
			j->p++;
		}
		it_json_t *item = parse_value(j, depth + 1);
		if (!item || push(j, v, key, item) < 0) {
			free(key);
			it_json_free(item);
			break;
		}
		skip_ws(j);
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p == (obj ? '}' : ']')) {
			j->p++;
			return v;
		}
		jfail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
		break;
	}
	it_json_free(v);
	return NULL;
}

static it_json_t *parse_value(jp_t *j, int depth)
{
	if (depth > 64) {
		jfail(j, "nested too deeply");
		return NULL;
	}
	skip_ws(j);
	char c = *j->p;
	if (c == '{' || c == '[')
		return parse_container(j, depth, c == '{');
	if (c == '"') {
		char *s = parse_string(j);
		if (!s)
			return NULL;
		it_json_t *v = new_node(j, IT_JSTR);
		if (v)
			v->str = s;
		else
			free(s);
		return v;
	}
	static const struct {
		const char *word;
		it_jtype_t type;
		double num;
	} words[] = {{"true", IT_JBOOL, 1}, {"false", IT_JBOOL, 0}, {"null", IT_JNULL, 0}};
	for (size_t i = 0; i < 3; i++) {
		size_t len = strlen(words[i].word);
		if (strncmp(j->p, words[i].word, len) == 0) {
			j->p += len;
			it_json_t *v = new_node(j, words[i].type);
			if (v)
				v->num = words[i].num;
			return v;
		}
	}
	if (c == '-' || isdigit((unsigned char)c)) {
		char *end;
		double x = strtod(j->p, &end);
		if (end == j->p) {
			jfail(j, "bad number");
			return NULL;
		}
		j->p = end;
		it_json_t *v = new_node(j, IT_JNUM);
		if (v)
			v->num = x;
		return v;
	}
	jfail(j, "unexpected character");
	return NULL;
}

it_json_t *it_json_parse(const char *text, char *err, size_t err_len)
{
	jp_t j = {text, err, err_len, 0};
	it_json_t *v = parse_value(&j, 0);
	if (v) {
		skip_ws(&j);
		if (*j.p) {
			jfail(&j, "trailing text after the JSON value");
			it_json_free(v);
			v = NULL;
		}
	}
	return v;
}

void it_json_free(it_json_t *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		if (v->keys)
			free(v->keys[i]);
		it_json_free(v->items[i]);
	}
	free(v->keys);
	free(v->items);
	free(v->str);
	free(v);
}

const it_json_t *it_json_get(const it_json_t *obj, const char *key)
{
	if (!obj || obj->type != IT_JOBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (strcmp(obj->keys[i], key) == 0)
			return obj->items[i];
	return NULL;
}
