// Chat items as HTML for the webview: markdown for answers (raw HTML in the model's text is
// escaped, never run), thoughts in a collapsed block, tool cards with title, kind, status,
// output (a command's as it streams), diffs and the permission buttons, and the agent's
// questions as forms. Pure: no VS Code, no DOM.
import { Marked } from "marked";

import { clientName, type ChatItem, type ChatState, type ToolCard } from "./chatState.js";
import { renderQuestion } from "./form.js";
import { escapeHtml } from "./html.js";

const markdown = new Marked({ gfm: true, breaks: false, async: false });
// The model's text is untrusted: raw HTML in it is shown as text.
markdown.use({
  renderer: {
    html(token) {
      return escapeHtml(token.text);
    },
  },
});

export { escapeHtml };

/** Markdown to HTML (links keep only http(s), file and relative targets). */
export function renderMarkdown(text: string): string {
  const html = markdown.parse(text) as string;
  return html.replace(/href="(?!https?:|file:|#|\.{0,2}\/|[\w-]+\.)[^"]*"/gi, 'href="#"');
}

/**
 * What a card's kind is called on its badge: plain words, never emoji (which render as a
 * missing glyph where the system has no emoji font, as on many Linux desktops).
 */
const KIND_LABELS: Record<string, string> = {
  read: "read",
  edit: "edit",
  delete: "delete",
  move: "move",
  search: "search",
  execute: "run",
  think: "think",
  fetch: "fetch",
  switch_mode: "mode",
  other: "tool",
};

/** What a card shows of a long output: its end. */
function tail(text: string, max = 4000): string {
  return text.length > max ? `…${text.slice(text.length - max)}` : text;
}

function renderCardContent(card: ToolCard, terminals: Record<string, string>): string {
  return card.content
    .map((content, index) => {
      switch (content.type) {
        case "content": {
          const block = content.content;
          if (block.type === "text") return `<pre class="output">${escapeHtml(block.text)}</pre>`;
          if (block.type === "image") return `<div class="output">[image]</div>`;
          return "";
        }
        case "diff": {
          const lines = diffLines(content.oldText ?? "", content.newText);
          return `<div class="diff" data-index="${index}">
  <div class="diff-head"><span class="path">${escapeHtml(content.path)}</span>
  <button class="open-diff" data-tool="${escapeHtml(card.toolCallId)}" data-index="${index}">Open diff</button></div>
  <pre>${lines}</pre></div>`;
        }
        case "terminal": {
          const output = terminals[content.terminalId] ?? "";
          return `<div class="terminal-ref">Also in VS Code's terminal panel (“Talaria: …”)</div><pre class="output terminal-output" data-terminal="${escapeHtml(content.terminalId)}">${escapeHtml(tail(output))}</pre>`;
        }
        default:
          return "";
      }
    })
    .join("");
}

/** A short line diff: removed lines then added lines (the diff editor shows the full one). */
export function diffLines(oldText: string, newText: string): string {
  const before = oldText === "" ? [] : oldText.split("\n");
  const after = newText.split("\n");
  const removed = before.filter((line) => !after.includes(line));
  const added = after.filter((line) => !before.includes(line));
  const shown = [
    ...removed.slice(0, 20).map((l) => `<span class="del">- ${escapeHtml(l)}</span>`),
    ...added.slice(0, 20).map((l) => `<span class="add">+ ${escapeHtml(l)}</span>`),
  ];
  const hidden = removed.length + added.length - shown.length;
  if (hidden > 0) shown.push(`<span class="more">… ${hidden} more lines</span>`);
  return shown.join("\n");
}

export function renderCard(card: ToolCard, terminals: Record<string, string> = {}): string {
  const label = KIND_LABELS[card.kind] ?? KIND_LABELS.other;
  const permission = card.permission
    ? `<div class="permission" role="group" aria-label="Permission">
  ${card.permission.options
    .map(
      (o) =>
        `<button class="permission-option ${escapeHtml(o.kind)}" data-tool="${escapeHtml(card.toolCallId)}" data-option="${escapeHtml(o.optionId)}">${escapeHtml(o.name)}</button>`,
    )
    .join("\n  ")}
</div>`
    : "";
  const resolved = card.resolved
    ? `<div class="permission-resolved">Answered by ${escapeHtml(card.resolved.by)}: ${escapeHtml(card.resolved.answer)}</div>`
    : "";
  return `<div class="tool-card status-${escapeHtml(card.status)}" data-tool="${escapeHtml(card.toolCallId)}">
<div class="tool-head"><span class="kind" title="${escapeHtml(card.kind)}">${label}</span>
<span class="title">${escapeHtml(card.title)}</span>
<span class="status">${escapeHtml(card.status.replace("_", " "))}</span></div>
${renderCardContent(card, terminals)}${permission}${resolved}
</div>`;
}

/** A sent message's actions (shown when the agent rewinds): edit it, or restore files to before it. */
function messageActions(itemId: string): string {
  const id = escapeHtml(itemId);
  return `<div class="message-actions"><button class="message-edit" data-item="${id}" title="Edit this message and send it again: the conversation goes back to before it">Edit</button><button class="message-restore" data-item="${id}" title="Go back to before this message and put back the files the agent changed since">Restore files to here</button></div>`;
}

/** An item as HTML; `terminals` is the output so far of the commands cards show. */
export function renderItem(item: ChatItem, terminals: Record<string, string> = {}): string {
  switch (item.kind) {
    case "user":
      return `<div class="message user${item.steered ? " steered" : ""}">${
        item.steered ? '<span class="steered-label">steered</span> ' : ""
      }<span class="user-text">${escapeHtml(item.text)}</span>${
        item.attachments.length
          ? `<div class="attachments">${item.attachments.map((a) => `<span class="chip">${escapeHtml(a)}</span>`).join("")}</div>`
          : ""
      }${item.messageId ? messageActions(item.id) : ""}</div>`;
    case "agent":
      return `<div class="message agent">${renderMarkdown(item.text)}</div>`;
    case "thought":
      return `<details class="thought"><summary>Thinking</summary><div>${renderMarkdown(item.text)}</div></details>`;
    case "tool":
      return renderCard(item.card, terminals);
    case "question":
      return renderQuestion(item.id, item.question);
    case "notice":
      return `<div class="notice ${escapeHtml(item.severity)}">${escapeHtml(item.text)}${
        item.action
          ? ` <button class="notice-action" data-command="${escapeHtml(item.action.command)}">${escapeHtml(item.action.label)}</button>`
          : ""
      }</div>`;
    case "stop":
      return item.reason === "end_turn"
        ? ""
        : `<div class="stop">${escapeHtml(stopText(item.reason))}</div>`;
  }
}

export function stopText(reason: string): string {
  switch (reason) {
    case "cancelled":
      return "Stopped.";
    case "max_tokens":
      return "The answer reached the model's output limit.";
    case "max_turn_requests":
      return "The turn reached its request limit.";
    case "refusal":
      return "The model refused.";
    default:
      return `Ended: ${reason}`;
  }
}

/** The plan as a checklist. */
export function renderPlan(state: ChatState): string {
  if (!state.plan.length) return "";
  const mark = (status: string) => (status === "completed" ? "☑" : status === "in_progress" ? "◐" : "☐");
  return `<ul class="plan">${state.plan
    .map((e) => `<li class="${escapeHtml(e.status)}">${mark(e.status)} ${escapeHtml(e.content)}</li>`)
    .join("")}</ul>`;
}

/** Who is attached to an attached session and who has control, as the header shows it. */
export function renderAttachment(state: ChatState): { clients: string; control: string; turn: string } | undefined {
  const attachment = state.attachment;
  if (!attachment) return undefined;
  if (attachment.ended) return { clients: "Session deleted", control: "It is followed no more", turn: "" };
  if (!attachment.clients.length) return { clients: "Not attached", control: "", turn: "" };
  const named = attachment.clients.map((c) => clientName(state, c));
  const controller = attachment.clients.find((c) => c.clientId === attachment.controller);
  return {
    clients: `${attachment.clients.length} attached: ${named.join(", ")}`,
    control: controller ? `Control: ${clientName(state, controller)}` : "No one has control",
    turn: attachment.othersTurn ? `${clientName(state, { clientId: attachment.othersTurn })} runs a turn…` : "",
  };
}

/** Context usage and cost, e.g. "12.3k / 128k tokens (10%) · $0.04". */
export function renderUsage(state: ChatState): string {
  const usage = state.usage;
  if (!usage) return "";
  const k = (n: number) => (n >= 1000 ? `${(n / 1000).toFixed(n >= 10000 ? 0 : 1)}k` : String(n));
  const percent = usage.size > 0 ? Math.round((usage.used / usage.size) * 100) : 0;
  const cost = usage.cost ? ` · ${usage.cost.currency === "USD" ? "$" : `${usage.cost.currency} `}${usage.cost.amount.toFixed(2)}` : "";
  return `${k(usage.used)} / ${k(usage.size)} tokens (${percent}%)${cost}`;
}
