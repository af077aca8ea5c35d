// An agent's question as a form (ACP `elicitation/create` in form mode): the fields read from
// its restricted JSON Schema, their HTML on the chat's card, and the answer checked against
// the schema before it goes back. Pure: no VS Code, no DOM.
import { escapeHtml } from "./html.js";

/** One field of a form, as the chat shows it. */
export type FormField = {
  name: string;
  title: string;
  description?: string;
  type: "string" | "number" | "integer" | "boolean" | "choice" | "multi";
  choices: { value: string; label: string }[];
  required: boolean;
  default?: unknown;
};

/** A question waiting for the user, or answered (then `answer` says how). */
export type Question = {
  message: string;
  fields: FormField[];
  answer?: string;
};

/** The part of a requested schema a form is made of. */
type Schema = {
  properties?: Record<string, object> | null;
  required?: string[] | null;
};

function choicesOf(property: Record<string, unknown>): { value: string; label: string }[] {
  const oneOf = property.oneOf ?? property.anyOf;
  if (Array.isArray(oneOf)) {
    return oneOf
      .filter((c): c is { const: unknown; title?: unknown } => !!c && typeof c === "object" && "const" in c)
      .map((c) => ({ value: String(c.const), label: String(c.title ?? c.const) }));
  }
  if (Array.isArray(property.enum)) {
    const names = Array.isArray(property.enumNames) ? property.enumNames : [];
    return property.enum.map((value, i) => ({ value: String(value), label: String(names[i] ?? value) }));
  }
  return [];
}

/** The fields of a requested schema (an object of primitive properties). */
export function formFields(schema: Schema): FormField[] {
  const required = new Set(schema.required ?? []);
  return Object.entries(schema.properties ?? {}).map(([name, described]) => {
    const property = described as Record<string, unknown>;
    const type = String(property.type ?? "string");
    const items = (property.items ?? {}) as Record<string, unknown>;
    let kind: FormField["type"];
    let choices: FormField["choices"] = [];
    if (type === "array") {
      kind = "multi";
      choices = choicesOf(items);
    } else if (type === "boolean" || type === "number" || type === "integer") {
      kind = type;
    } else {
      choices = choicesOf(property);
      kind = choices.length ? "choice" : "string";
    }
    return {
      name,
      title: String(property.title ?? name),
      description: typeof property.description === "string" ? property.description : undefined,
      type: kind,
      choices,
      required: required.has(name),
      default: property.default,
    };
  });
}

function fieldHtml(questionId: string, field: FormField): string {
  const id = `${questionId}-${field.name}`;
  const attributes = `id="${escapeHtml(id)}" data-field="${escapeHtml(field.name)}" data-type="${field.type}"${
    field.required ? " required" : ""
  }`;
  const label = `<label for="${escapeHtml(id)}">${escapeHtml(field.title)}${field.required ? " *" : ""}</label>`;
  const help = field.description ? `<div class="field-help">${escapeHtml(field.description)}</div>` : "";
  switch (field.type) {
    case "boolean":
      return `<div class="field checkbox"><input type="checkbox" ${attributes}${field.default === true ? " checked" : ""}> ${label}${help}</div>`;
    case "choice":
      return `<div class="field">${label}<select ${attributes}>${field.choices
        .map(
          (c) =>
            `<option value="${escapeHtml(c.value)}"${String(field.default) === c.value ? " selected" : ""}>${escapeHtml(c.label)}</option>`,
        )
        .join("")}</select>${help}</div>`;
    case "multi":
      return `<fieldset class="field" ${attributes}><legend>${escapeHtml(field.title)}</legend>${field.choices
        .map(
          (c) =>
            `<label class="choice"><input type="checkbox" value="${escapeHtml(c.value)}"> ${escapeHtml(c.label)}</label>`,
        )
        .join("")}${help}</fieldset>`;
    case "number":
    case "integer":
      return `<div class="field">${label}<input type="number"${field.type === "integer" ? ' step="1"' : ""} ${attributes}${
        typeof field.default === "number" ? ` value="${field.default}"` : ""
      }>${help}</div>`;
    default:
      return `<div class="field">${label}<input type="text" ${attributes}${
        typeof field.default === "string" ? ` value="${escapeHtml(field.default)}"` : ""
      }>${help}</div>`;
  }
}

/** A question as a form with Submit, Decline and Cancel; once answered, what was answered. */
export function renderQuestion(questionId: string, question: Question): string {
  const message = `<div class="question-message">${escapeHtml(question.message)}</div>`;
  if (question.answer !== undefined) {
    return `<div class="question answered" data-question="${escapeHtml(questionId)}">${message}<div class="question-answer">${escapeHtml(question.answer)}</div></div>`;
  }
  return `<form class="question" data-question="${escapeHtml(questionId)}">${message}
${question.fields.map((f) => fieldHtml(questionId, f)).join("\n")}
<div class="question-buttons">
  <button type="submit" class="question-submit" data-action="accept">Submit</button>
  <button type="button" class="question-decline" data-action="decline">Decline</button>
  <button type="button" class="question-cancel" data-action="cancel">Cancel</button>
</div></form>`;
}

/** Checks an answer against the fields: required ones given, numbers numbers, choices offered. */
export function checkAnswer(fields: FormField[], content: Record<string, unknown>): string | undefined {
  for (const field of fields) {
    const value = content[field.name];
    const missing = value === undefined || value === "" || (Array.isArray(value) && value.length === 0);
    if (missing) {
      if (field.required) return `${field.title} is required.`;
      continue;
    }
    if ((field.type === "number" || field.type === "integer") && (typeof value !== "number" || Number.isNaN(value))) {
      return `${field.title} must be a number.`;
    }
    if (field.type === "integer" && !Number.isInteger(value)) return `${field.title} must be a whole number.`;
    if (field.type === "choice" && !field.choices.some((c) => c.value === value)) {
      return `${field.title}: choose one of the options.`;
    }
    if (field.type === "multi" && !(Array.isArray(value) && value.every((v) => field.choices.some((c) => c.value === v)))) {
      return `${field.title}: choose among the options.`;
    }
  }
  return undefined;
}

/** How an answer reads in the chat once given. */
export function describeAnswer(action: string, content: Record<string, unknown> | undefined): string {
  if (action === "decline") return "Declined.";
  if (action === "cancel") return "Cancelled.";
  const values = Object.values(content ?? {}).map((v) => (Array.isArray(v) ? v.join(", ") : String(v)));
  return values.length ? `Answered: ${values.join(" · ")}` : "Answered.";
}
