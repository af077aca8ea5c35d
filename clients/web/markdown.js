// Markdown to DOM nodes, safely: the text is never parsed as HTML (every piece becomes a
// text node or an element built here), and links go only to http(s) addresses.
// Covers what models write: headings, paragraphs, fenced code, lists, quotes, inline code,
// bold, italics and links.

/** Renders `text` into `parent` (replacing what it held). */
export function renderMarkdown(parent, text) {
  parent.replaceChildren(...blocks(text));
}

function element(tag, children = [], attributes = {}) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

function blocks(text) {
  const lines = text.split("\n");
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^```(\S*)/);
    if (fence) {
      const code = [];
      i++;
      while (i < lines.length && !lines[i].startsWith("```")) code.push(lines[i++]);
      i++;
      const attributes = fence[1] ? { "data-language": fence[1] } : {};
      out.push(element("pre", [element("code", [code.join("\n")], attributes)]));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      out.push(element(`h${heading[1].length}`, inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const items = [];
      while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
        items.push(element("li", inline(lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ""))));
        i++;
      }
      out.push(element(ordered ? "ol" : "ul", items));
      continue;
    }
    if (line.startsWith(">")) {
      const quoted = [];
      while (i < lines.length && lines[i].startsWith(">")) quoted.push(lines[i++].replace(/^>\s?/, ""));
      out.push(element("blockquote", blocks(quoted.join("\n"))));
      continue;
    }
    if (line.trim() === "") {
      i++;
      continue;
    }
    const paragraph = [];
    while (i < lines.length && lines[i].trim() !== "" && !/^(```|#{1,6}\s|>|\s*([-*+]|\d+[.)])\s)/.test(lines[i])) {
      paragraph.push(lines[i++]);
    }
    out.push(element("p", inline(paragraph.join("\n"))));
  }
  return out;
}

const INLINE = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*|_[^_\s][^_]*_)|(\[[^\]]+\]\([^)\s]+\))/;

function inline(text) {
  const out = [];
  let rest = text;
  while (rest) {
    const found = rest.match(INLINE);
    if (!found) {
      out.push(rest);
      break;
    }
    if (found.index > 0) out.push(rest.slice(0, found.index));
    const token = found[0];
    if (found[1]) out.push(element("code", [token.slice(1, -1)]));
    else if (found[2]) out.push(element("strong", inline(token.slice(2, -2))));
    else if (found[3]) out.push(element("em", inline(token.slice(1, -1))));
    else out.push(link(token));
    rest = rest.slice(found.index + token.length);
  }
  return out;
}

function link(token) {
  const [, label, href] = token.match(/^\[([^\]]+)\]\(([^)\s]+)\)$/);
  if (!/^https?:\/\//i.test(href)) return label;
  return element("a", [label], { href, target: "_blank", rel: "noopener noreferrer" });
}
