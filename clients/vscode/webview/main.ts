// The chat view's page script: shows the items the extension renders, the header (pickers,
// usage, plan, sessions), who is attached to a session attached to in a `talaria serve` (with
// Take control and Leave), the agent's questions as forms, and the prompt box (history,
// slash-command and @file completion, pasted images, Send/Stop). Everything it does goes to
// the extension as a message.
import type { FromView, HeaderOption, ToView } from "../src/viewMessages.js";

declare function acquireVsCodeApi(): { postMessage(message: FromView): void };
const vscode = acquireVsCodeApi();
const send = (message: FromView) => vscode.postMessage(message);

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className = "", text = ""): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  return node;
}

// Layout.
const header = el("div", "header");
const pickers = el("div", "pickers");
const sessionsButton = el("button", "sessions-button", "Sessions");
const newButton = el("button", "new-button", "New");
const usage = el("div", "usage");
header.append(pickers, sessionsButton, newButton, usage);
const sessionsList = el("div", "sessions hidden");
// An attached session: who is attached, who has control, another client's turn.
const attached = el("div", "attached hidden");
const attachedClients = el("div", "attached-clients");
const attachedControl = el("span", "attached-control");
const attachedTurn = el("span", "attached-turn");
const takeControlButton = el("button", "take-control", "Take control");
takeControlButton.title = "Take control of this session: prompt, stop, answer; the client that had it becomes an observer";
const leaveButton = el("button", "leave-session", "Leave");
leaveButton.title = "Detach from this session (it goes on for the other clients)";
const attachedLine = el("div", "attached-line");
attachedLine.append(attachedControl, attachedTurn, takeControlButton, leaveButton);
attached.append(attachedClients, attachedLine);
const plan = el("div", "plan-box");
const log = el("div", "log");
const composer = el("div", "composer");
const chips = el("div", "chips");
const completions = el("ul", "completions hidden");
const input = el("textarea", "prompt");
input.placeholder = "Ask Talaria — / for commands, @ to mention a file";
input.rows = 3;
const sendButton = el("button", "send", "Send");
const stopButton = el("button", "stop-button hidden", "Stop");
// While a turn runs: a message goes into it (Steer, and Enter) or after it (Queue).
const steerButton = el("button", "steer-button hidden", "Steer");
steerButton.title = "Send into the running turn: the agent reads it at its next step";
const queueButton = el("button", "queue-button hidden", "Queue");
queueButton.title = "Send after the running turn ends";
composer.append(chips, completions, input, sendButton, steerButton, queueButton, stopButton);
document.body.append(header, attached, sessionsList, plan, log, composer);

type Command = { name: string; description: string; hint: string };
let commands: Command[] = [];
let acceptsImages = false;
let busy = false;
let canSteer = false;
/** The sent message being edited (its item id): Send rewinds to before it and resends. */
let editing: string | undefined;
const history: string[] = [];
let historyIndex = 0;
let mentions: string[] = [];
let images: { mimeType: string; data: string }[] = [];
let completionItems: { label: string; detail: string; insert: string; mention?: string }[] = [];
let completionIndex = 0;

function itemNode(id: string): HTMLElement {
  let node = document.getElementById(id);
  if (!node) {
    node = el("div", "item");
    node.id = id;
    log.append(node);
  }
  return node;
}

function scrollToEnd(): void {
  log.scrollTop = log.scrollHeight;
}

function renderPickers(options: HeaderOption[]): void {
  pickers.replaceChildren(
    ...options.map((option) => {
      const label = el("label", "picker");
      label.append(el("span", "", option.name));
      const select = el("select");
      select.dataset.config = option.id;
      for (const choice of option.choices) {
        const item = el("option", "", choice.name);
        item.value = choice.value;
        item.selected = choice.value === option.value;
        select.append(item);
      }
      select.addEventListener("change", () => send({ type: "setOption", configId: option.id, value: select.value }));
      label.append(select);
      return label;
    }),
  );
}

function renderChips(): void {
  chips.replaceChildren(
    ...mentions.map((m) => el("span", "chip", `@${m}`)),
    ...images.map((_, i) => el("span", "chip", `image ${i + 1}`)),
  );
}

window.addEventListener("message", (event: MessageEvent<ToView>) => {
  const message = event.data;
  switch (message.type) {
    case "reset":
      log.replaceChildren();
      for (const item of message.items) itemNode(item.id).innerHTML = item.html;
      scrollToEnd();
      break;
    case "item":
      itemNode(message.id).innerHTML = message.html;
      scrollToEnd();
      break;
    case "header":
      busy = message.busy;
      canSteer = message.canSteer;
      document.body.classList.toggle("can-rewind", message.canRewind);
      sendButton.classList.toggle("hidden", busy);
      stopButton.classList.toggle("hidden", !busy);
      steerButton.classList.toggle("hidden", !busy || !canSteer);
      queueButton.classList.toggle("hidden", !busy);
      input.placeholder = busy
        ? canSteer
          ? "Steer the running turn (Enter), or queue a message for after it"
          : "Queue a message for after the running turn"
        : "Ask Talaria — / for commands, @ to mention a file";
      usage.textContent = message.usage;
      plan.innerHTML = message.plan;
      if (commandsChanged(message.commands)) {
        commands = message.commands;
        // A `/` typed before the agent's list arrived completes from it as soon as it comes.
        if (currentWord().word.startsWith("/")) refreshCompletions();
      }
      acceptsImages = message.acceptsImages;
      sessionsButton.classList.toggle("hidden", !message.canList);
      attached.classList.toggle("hidden", !message.attachment);
      if (message.attachment) {
        attachedClients.textContent = message.attachment.clients;
        attachedControl.textContent = message.attachment.control;
        attachedTurn.textContent = message.attachment.turn;
        takeControlButton.classList.toggle("hidden", !message.attachment.offerControl);
      }
      renderPickers(message.options);
      break;
    case "sessions":
      sessionsList.replaceChildren(
        ...message.sessions.map((s) => {
          const button = el("button", "session", s.title);
          button.title = s.updatedAt;
          button.addEventListener("click", () => {
            sessionsList.classList.add("hidden");
            send({ type: "loadSession", sessionId: s.id });
          });
          return button;
        }),
      );
      if (!message.sessions.length) sessionsList.append(el("div", "empty", "No past sessions."));
      sessionsList.classList.remove("hidden");
      break;
    case "files":
      showCompletions(message.files.map((f) => ({ label: f, detail: "", insert: `@${f} `, mention: f })));
      break;
    case "questionProblem": {
      const form = log.querySelector<HTMLFormElement>(`form.question[data-question="${CSS.escape(message.id)}"]`);
      if (form) {
        let problem = form.querySelector<HTMLElement>(".question-problem");
        if (!problem) {
          problem = el("div", "question-problem");
          form.append(problem);
        }
        problem.textContent = message.problem;
        form.querySelectorAll("button").forEach((b) => ((b as HTMLButtonElement).disabled = false));
      }
      break;
    }
  }
});

/** The values of a question's form, by field name, typed as its schema says. */
function formContent(form: HTMLFormElement): Record<string, unknown> {
  const content: Record<string, unknown> = {};
  form.querySelectorAll<HTMLElement>("[data-field]").forEach((field) => {
    const name = field.dataset.field ?? "";
    switch (field.dataset.type) {
      case "boolean":
        content[name] = (field as HTMLInputElement).checked;
        break;
      case "number":
      case "integer": {
        const text = (field as HTMLInputElement).value.trim();
        if (text !== "") content[name] = Number(text);
        break;
      }
      case "multi":
        content[name] = Array.from(field.querySelectorAll<HTMLInputElement>("input:checked")).map((i) => i.value);
        break;
      default: {
        const value = (field as HTMLInputElement | HTMLSelectElement).value;
        if (value !== "") content[name] = value;
      }
    }
  });
  return content;
}

function answerQuestion(form: HTMLFormElement, action: "accept" | "decline" | "cancel"): void {
  form.querySelectorAll("button").forEach((b) => ((b as HTMLButtonElement).disabled = true));
  const id = form.dataset.question ?? "";
  send(action === "accept" ? { type: "question", id, action, content: formContent(form) } : { type: "question", id, action });
}

// A question's form: Submit (checked by the browser, then by the extension), Decline, Cancel.
log.addEventListener("submit", (event) => {
  const form = (event.target as HTMLElement).closest<HTMLFormElement>("form.question");
  if (!form) return;
  event.preventDefault();
  answerQuestion(form, "accept");
});

// Buttons inside rendered items: permission options, Open diff, notice actions.
log.addEventListener("click", (event) => {
  const target = (event.target as HTMLElement).closest("button");
  if (!target) return;
  if (target.classList.contains("permission-option")) {
    target.closest(".permission")?.querySelectorAll("button").forEach((b) => ((b as HTMLButtonElement).disabled = true));
    send({ type: "permission", toolCallId: target.dataset.tool ?? "", optionId: target.dataset.option ?? "" });
  } else if (target.classList.contains("open-diff")) {
    send({ type: "openDiff", toolCallId: target.dataset.tool ?? "", index: Number(target.dataset.index ?? 0) });
  } else if (target.classList.contains("message-edit")) {
    const item = target.closest(".item");
    const text = item?.querySelector(".message.user .user-text")?.textContent ?? "";
    editing = target.dataset.item;
    input.value = text.trim();
    input.placeholder = "Edit the message; Send goes back to before it and sends this instead (Esc: cancel)";
    input.focus();
  } else if (target.classList.contains("message-restore")) {
    send({ type: "rewind", itemId: target.dataset.item ?? "", restoreFiles: true });
  } else if (target.classList.contains("notice-action")) {
    send({ type: "command", command: target.dataset.command ?? "" });
  } else if (target.classList.contains("question-decline") || target.classList.contains("question-cancel")) {
    const form = target.closest<HTMLFormElement>("form.question");
    if (form) answerQuestion(form, target.classList.contains("question-decline") ? "decline" : "cancel");
  }
});

/** Sends what is typed: a prompt, or while a turn runs, a steer (`how` says) or a queued one. */
function submit(how: "steer" | "queue" = canSteer ? "steer" : "queue"): void {
  const text = input.value.trim();
  if (!text) return;
  history.push(text);
  historyIndex = history.length;
  const used = mentions.filter((m) => text.includes(`@${m}`));
  if (editing) {
    send({ type: "edit", itemId: editing, text, mentions: used, images });
    editing = undefined;
  } else {
    send(busy ? { type: how, text, mentions: used, images } : { type: "prompt", text, mentions: used, images });
  }
  input.value = "";
  mentions = [];
  images = [];
  renderChips();
  hideCompletions();
}

function commandsChanged(next: Command[]): boolean {
  return next.length !== commands.length || next.some((c, i) => c.name !== commands[i]?.name);
}

function showCompletions(items: typeof completionItems): void {
  completionItems = items;
  completionIndex = 0;
  completions.replaceChildren(
    ...items.map((item, i) => {
      const li = el("li", i === 0 ? "active" : "");
      li.append(el("span", "label", item.label), el("span", "detail", item.detail));
      li.addEventListener("mousedown", (event) => {
        event.preventDefault();
        accept(i);
      });
      return li;
    }),
  );
  completions.classList.toggle("hidden", items.length === 0);
}

function hideCompletions(): void {
  completionItems = [];
  completions.classList.add("hidden");
}

/** The word being typed at the caret. */
function currentWord(): { start: number; word: string } {
  const upto = input.value.slice(0, input.selectionStart);
  const start = Math.max(upto.lastIndexOf(" "), upto.lastIndexOf("\n")) + 1;
  return { start, word: upto.slice(start) };
}

function accept(index: number): void {
  const item = completionItems[index];
  if (!item) return;
  const { start } = currentWord();
  input.value = input.value.slice(0, start) + item.insert + input.value.slice(input.selectionStart);
  if (item.mention && !mentions.includes(item.mention)) mentions.push(item.mention);
  renderChips();
  hideCompletions();
  input.focus();
}

/** Completes the word at the caret: commands after a leading `/`, files after `@`. */
function refreshCompletions(): void {
  const { start, word } = currentWord();
  if (word.startsWith("/") && start === 0) {
    const typed = word.slice(1).toLowerCase();
    showCompletions(
      commands
        .filter((c) => c.name.toLowerCase().startsWith(typed))
        .map((c) => ({ label: `/${c.name}`, detail: c.description, insert: `/${c.name} ` })),
    );
  } else if (word.startsWith("@") && word.length > 1) {
    send({ type: "searchFiles", query: word.slice(1) });
  } else {
    hideCompletions();
  }
}

input.addEventListener("input", refreshCompletions);

input.addEventListener("keydown", (event) => {
  const completing = completionItems.length > 0;
  if (completing && (event.key === "ArrowDown" || event.key === "ArrowUp")) {
    event.preventDefault();
    const step = event.key === "ArrowDown" ? 1 : -1;
    completionIndex = (completionIndex + step + completionItems.length) % completionItems.length;
    completions.querySelectorAll("li").forEach((li, i) => li.classList.toggle("active", i === completionIndex));
    return;
  }
  if (completing && (event.key === "Tab" || event.key === "Enter")) {
    event.preventDefault();
    accept(completionIndex);
    return;
  }
  if (event.key === "Escape") {
    hideCompletions();
    if (editing) {
      editing = undefined;
      input.value = "";
      input.placeholder = "Ask Talaria — / for commands, @ to mention a file";
    }
    return;
  }
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    submit();
    return;
  }
  // History: up at the first line, down at the last.
  const atStart = input.selectionStart === 0 && input.selectionEnd === 0;
  const atEnd = input.selectionStart === input.value.length;
  if (event.key === "ArrowUp" && atStart && historyIndex > 0) {
    event.preventDefault();
    historyIndex -= 1;
    input.value = history[historyIndex];
  } else if (event.key === "ArrowDown" && atEnd && historyIndex < history.length) {
    event.preventDefault();
    historyIndex += 1;
    input.value = history[historyIndex] ?? "";
  }
});

input.addEventListener("paste", (event) => {
  const files = Array.from(event.clipboardData?.files ?? []).filter((f) => f.type.startsWith("image/"));
  if (!files.length) return;
  event.preventDefault();
  if (!acceptsImages) return;
  for (const file of files) {
    const reader = new FileReader();
    reader.onload = () => {
      const url = String(reader.result);
      images.push({ mimeType: file.type, data: url.slice(url.indexOf(",") + 1) });
      renderChips();
    };
    reader.readAsDataURL(file);
  }
});

sendButton.addEventListener("click", () => submit());
steerButton.addEventListener("click", () => submit("steer"));
queueButton.addEventListener("click", () => submit("queue"));
stopButton.addEventListener("click", () => send({ type: "stop" }));
newButton.addEventListener("click", () => send({ type: "newSession" }));
takeControlButton.addEventListener("click", () => send({ type: "takeControl" }));
leaveButton.addEventListener("click", () => send({ type: "leave" }));
sessionsButton.addEventListener("click", () => {
  if (sessionsList.classList.contains("hidden")) send({ type: "listSessions" });
  else sessionsList.classList.add("hidden");
});

send({ type: "ready" });
