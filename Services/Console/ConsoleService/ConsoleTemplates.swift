import Mustache

// The console's pages as Mustache templates: every `{{value}}` is HTML-escaped by the renderer; the only unescaped
// values are `{{{body}}}`, a page this renderer made, and the overview's charts, SVG that `ConsoleService.barChart` drew
// from numbers and escaped text. No scripts: the confirmation step is a page of its own, so the Content-Security-Policy
// allows none.
enum ConsoleTemplates {
    /// Every page, each rendered with `ConsoleHTML` escaping.
    static func library() throws -> MustacheLibrary {
        MustacheContentTypes.register(ConsoleHTML(), named: ConsoleHTML.name)
        var library = MustacheLibrary()
        for (name, text) in [
            ("layout", layout), ("signIn", signIn), ("overview", overview), ("notFound", notFound), ("customer", customer),
            ("confirm", confirm), ("done", done), ("audit", audit), ("problem", problem), ("operators", operators), ("catalog", catalog),
        ] {
            try library.register("{{% CONTENT_TYPE: \(ConsoleHTML.name)}}" + text, named: name)
        }
        return library
    }

    static let layout = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>{{title}} - IAP support console</title>
        <link rel="stylesheet" href="/static/console.css"></head>
        <body>
        <header>
        <a class="brand" href="/">IAP support console</a>
        {{#operator}}
        <form class="search" method="get" action="/search"><label>Search <input name="q" type="search" required></label><button type="submit">Find</button></form>
        <nav>{{#isAdmin}}<a href="/catalog">Catalog</a> <a href="/audit">Audit</a> <a href="/operators">Operators</a>{{/isAdmin}}
        <span class="who">{{name}} ({{role}})</span>
        <form method="post" action="/sign-out"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit">Sign out</button></form>
        <form method="post" action="/sign-out-everywhere"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit">Sign out everywhere</button></form>
        </nav>
        {{/operator}}
        </header>
        <main>
        {{#message}}<p class="message">{{message}}</p>{{/message}}
        {{{body}}}
        </main>
        </body></html>
        """

    static let signIn = """
        <h1>Sign in</h1>
        <form method="post" action="/sign-in" class="stack">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label>Username <input name="username" autocomplete="username" required></label>
        <label>Password <input name="password" type="password" autocomplete="current-password" required></label>
        <label>Code <input name="code" inputmode="numeric" autocomplete="one-time-code" required></label>
        <button type="submit">Sign in</button>
        </form>
        """

    static let overview = """
        <h1>Overview</h1>
        <p>Find a customer by username, account id, appAccountToken, transaction or original transaction id, or the order id
        on Apple's emailed receipt. Production purchases only (Sandbox ones are free); days in UTC.</p>
        <table class="figures"><tr><th></th><th>Today</th><th>Last 30 days</th></tr>
        {{#figures}}<tr id="figure-{{id}}"><th>{{name}}</th><td class="today">{{today}}</td><td class="month">{{month}}</td></tr>{{/figures}}
        {{#revenue}}<tr class="revenue" id="revenue-{{currency}}"><th>Revenue ({{currency}})</th><td class="today">{{today}}</td><td class="month">{{month}}</td></tr>{{/revenue}}
        </table>
        <table class="figures">
        <tr><th>Subscriptions in force</th><td id="active">{{activeSubscriptions}}</td></tr>
        <tr><th>Parked notifications</th><td id="parked">{{parked}}</td></tr>
        <tr><th>Waiting at the stores (finishes, acknowledgements, ties)</th><td id="waiting">{{waiting}}</td></tr>
        </table>
        <div class="charts">{{{purchasesChart}}}{{{refundsChart}}}{{#revenue}}{{{chart}}}{{/revenue}}</div>
        """

    static let notFound = """
        <h1>Nothing found</h1>
        <p>No customer matches <code>{{query}}</code>.</p>
        """

    static let customer = """
        <h1>Customer <span id="username">{{username}}</span></h1>
        <dl class="facts">
        <dt>Account id</dt><dd id="account-id">{{accountId}}</dd>
        <dt>appAccountToken</dt><dd>{{appAccountToken}}</dd>
        <dt>Created</dt><dd>{{created}}</dd>
        </dl>
        {{#mayAct}}
        <form method="post" action="/customers/{{accountId}}/confirm" class="inline">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="sign-out">
        <label>Reason <input name="reason" required></label><button type="submit">Sign out of all devices</button></form>
        <form method="post" action="/customers/{{accountId}}/confirm" class="inline">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="grant-order">
        <label>Apple order id <input name="orderId" required></label><label>Reason <input name="reason" required></label>
        <button type="submit">Grant order</button></form>
        {{/mayAct}}
        {{#scopes}}
        <section class="scope" id="scope-{{environment}}">
        <h2>{{environment}}</h2>
        <p>Balance <strong class="balance">{{balance}}</strong> coins, debt <strong class="debt">{{owed}}</strong> coins</p>
        {{#hasEntitlements}}
        <table><caption>Entitlements</caption><tr><th>Entitlement</th><th>Product</th><th>Ends</th><th>Renewal</th><th>Original transaction</th></tr>
        {{#entitlements}}<tr><td>{{entitlement}}</td><td>{{productId}}</td><td>{{ends}}</td><td>{{renewal}}</td><td>{{originalTransactionId}}</td></tr>{{/entitlements}}
        </table>
        {{/hasEntitlements}}
        <table class="ledger"><caption>Coin ledger (newest first, balance after each row)</caption>
        <tr><th>Row</th><th>When</th><th>Kind</th><th>Change</th><th>Balance</th><th>Debt</th><th>Transaction</th><th>Memo</th></tr>
        {{#ledger}}<tr class="ledger-row"><td>{{id}}</td><td>{{when}}</td><td class="kind">{{kind}}</td><td class="delta">{{delta}}</td><td class="after">{{balance}}</td><td>{{owed}}</td><td>{{transactionId}}</td><td class="memo">{{memo}}</td></tr>{{/ledger}}
        </table>
        {{#mayAct}}
        <form method="post" action="/customers/{{accountId}}/confirm" class="inline">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="give-coins"><input type="hidden" name="environment" value="{{environment}}">
        <label>Coins <input name="amount" type="number" min="1" required></label><label>Reason <input name="reason" required></label>
        <button type="submit">Give coins</button></form>
        <form method="post" action="/customers/{{accountId}}/confirm" class="inline">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="take-coins"><input type="hidden" name="environment" value="{{environment}}">
        <label>Coins <input name="amount" type="number" min="1" required></label><label>Reason <input name="reason" required></label>
        <button type="submit">Take coins back</button></form>
        {{/mayAct}}
        </section>
        {{/scopes}}
        <section><h2>Purchases</h2>
        <table class="purchases"><tr><th>Transaction</th><th>Original</th><th>Product</th><th>Environment</th><th>State</th><th>Bought</th><th>Notifications</th><th></th></tr>
        {{#purchases}}<tr><td>{{transactionId}}</td><td>{{originalTransactionId}}</td><td>{{productId}}</td><td>{{environment}}</td><td class="state">{{state}}</td><td>{{bought}}</td><td>{{notifications}}</td>
        <td>{{#mayRevoke}}<form method="post" action="/customers/{{accountId}}/confirm" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="revoke"><input type="hidden" name="transactionId" value="{{transactionId}}"><label>Reason <input name="reason" required></label><button type="submit">Revoke</button></form>{{/mayRevoke}}
        {{#mayExtend}}<form method="post" action="/customers/{{accountId}}/confirm" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="extend"><input type="hidden" name="transactionId" value="{{originalTransactionId}}"><label>Days <input name="days" type="number" min="1" max="90" required></label><label>Reason <input name="reason" required></label><button type="submit">Extend</button></form>{{/mayExtend}}</td></tr>{{/purchases}}
        </table></section>
        <section><h2>Notifications</h2>
        <table><tr><th>Received</th><th>Type</th><th>State</th><th>Original transaction</th><th>Last error</th><th></th></tr>
        {{#notifications}}<tr><td>{{received}}</td><td>{{type}}</td><td>{{state}}</td><td>{{originalTransactionId}}</td><td>{{lastError}}</td>
        <td>{{#mayRetry}}<form method="post" action="/customers/{{accountId}}/confirm" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="retry"><input type="hidden" name="notificationUUID" value="{{uuid}}"><input type="hidden" name="reason" value="retry"><button type="submit">Retry</button></form>{{/mayRetry}}
        {{#mayDismiss}}<form method="post" action="/customers/{{accountId}}/confirm" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="dismiss"><input type="hidden" name="notificationUUID" value="{{uuid}}"><label>Reason <input name="reason" required></label><button type="submit">Dismiss</button></form>{{/mayDismiss}}</td></tr>{{/notifications}}
        </table></section>
        <section><h2>Timeline</h2>
        <table class="timeline"><tr><th>When</th><th>What</th><th>Scope</th><th>Details</th><th>Balance after</th></tr>
        {{#timeline}}<tr><td>{{when}}</td><td>{{type}}</td><td>{{scope}}</td><td>{{details}}</td><td>{{balance}}</td></tr>{{/timeline}}
        </table></section>
        <section><h2>Audit</h2>
        <table class="audit"><tr><th>When</th><th>Action</th><th>Operator</th><th>Reason</th><th>Transaction</th><th>Credential</th></tr>
        {{#audit}}<tr><td>{{when}}</td><td>{{action}}</td><td class="operator">{{operatorName}}</td><td class="reason">{{reason}}</td><td>{{transactionId}}</td><td>{{credential}}</td></tr>{{/audit}}
        </table></section>
        """

    static let confirm = """
        <h1>Confirm: {{label}}</h1>
        <p>{{summary}}</p>
        <p>Reason: <q>{{reason}}</q></p>
        <form method="post" action="/customers/{{accountId}}/do">
        <input type="hidden" name="csrf" value="{{csrf}}">
        {{#fields}}<input type="hidden" name="{{name}}" value="{{value}}">{{/fields}}
        <button type="submit">Confirm</button>
        </form>
        <p><a href="/customers/{{accountId}}">Cancel</a></p>
        """

    static let done = """
        <h1>Done: {{label}}</h1>
        <p id="outcome">{{outcome}}</p>
        {{#row}}<table class="ledger"><caption>Ledger row</caption><tr><th>Row</th><th>Kind</th><th>Change</th><th>Balance</th><th>Memo</th></tr>
        <tr><td>{{id}}</td><td>{{kind}}</td><td>{{delta}}</td><td>{{balance}}</td><td>{{memo}}</td></tr></table>{{/row}}
        {{#audit}}<table class="audit"><caption>Audit entry</caption><tr><th>When</th><th>Action</th><th>Operator</th><th>Reason</th></tr>
        <tr><td>{{when}}</td><td>{{action}}</td><td class="operator">{{operatorName}}</td><td class="reason">{{reason}}</td></tr></table>{{/audit}}
        <p><a href="/customers/{{accountId}}">Back to the customer</a></p>
        """

    static let audit = """
        <h1>Operators' audit</h1>
        <form method="get" action="/audit" class="inline"><label>Operator <input name="operator" value="{{operatorFilter}}"></label>
        <label>Action <input name="action" value="{{actionFilter}}"></label><button type="submit">Filter</button></form>
        <table class="audit"><tr><th>When</th><th>Operator</th><th>Action</th><th>Detail</th><th>Address</th></tr>
        {{#entries}}<tr><td>{{when}}</td><td>{{operatorName}}</td><td>{{action}}</td><td>{{detail}}</td><td>{{address}}</td></tr>{{/entries}}
        </table>
        """

    static let operators = """
        <h1>Operators</h1>
        {{#created}}<div class="message" id="created"><p>Operator <strong>{{name}}</strong> ({{role}}) created. Shown once: hand these over
        in person or through a password manager.</p><p>Password <code id="new-password">{{password}}</code></p>
        <p>TOTP secret (base32, 6 digits, 30 s) <code id="new-secret">{{totpSecret}}</code></p></div>{{/created}}
        <table class="operators"><tr><th>Name</th><th>Role</th><th>Created</th><th></th></tr>
        {{#operators}}<tr><td>{{name}}</td><td>{{role}}</td><td>{{created}}</td><td>{{^isSelf}}
        <form method="post" action="/operators" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="set-role"><input type="hidden" name="name" value="{{name}}">
        <label>Role <select name="role"><option>viewer</option><option>support</option><option>admin</option></select></label><button type="submit">Change role</button></form>
        <form method="post" action="/operators" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="remove"><input type="hidden" name="name" value="{{name}}"><button type="submit">Remove</button></form>
        {{/isSelf}}</td></tr>{{/operators}}
        </table>
        <form method="post" action="/operators" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="add">
        <label>Name <input name="name" required></label>
        <label>Role <select name="role"><option>viewer</option><option>support</option><option>admin</option></select></label>
        <button type="submit">Add operator</button></form>
        """

    static let catalog = """
        <h1>Catalog</h1>
        <form method="get" action="/catalog" class="inline"><label>Storefront <input name="storefront" value="{{storefront}}" size="3"></label>
        <button type="submit">Show</button></form>
        <table class="catalog"><tr><th>Product</th><th>Type</th><th>Title</th><th>Grants</th><th>Price in {{storefront}}</th><th></th></tr>
        {{#products}}<tr><td>{{productId}}</td><td>{{type}}</td><td>{{title}}</td><td>{{grant}}</td><td class="price">{{price}}</td><td>
        <form method="post" action="/catalog" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="set-prices"><input type="hidden" name="productId" value="{{productId}}">
        <label>Prices (every storefront, replaced) <input name="prices" placeholder="USA:USD:0.99 DEU:EUR:1.09" required></label><button type="submit">Set prices</button></form>
        <form method="post" action="/catalog" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="action" value="retire"><input type="hidden" name="productId" value="{{productId}}"><button type="submit">Retire</button></form>
        </td></tr>{{/products}}
        </table>
        """

    static let problem = """
        <h1>{{heading}}</h1>
        <p>{{detail}}</p>
        """

    static let css = """
        body { font: 15px/1.4 system-ui, sans-serif; margin: 0; color: #1b1b1b; background: #fafafa; }
        header { display: flex; flex-wrap: wrap; gap: 1em; align-items: center; padding: .6em 1em; background: #23395d; color: #fff; }
        header a { color: #fff; } .brand { font-weight: bold; text-decoration: none; }
        header form { display: inline; margin: 0; } nav { display: flex; gap: .8em; align-items: center; margin-left: auto; }
        main { padding: 1em 1.5em; } table { border-collapse: collapse; margin: .6em 0 1.2em; background: #fff; }
        th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
        caption { text-align: left; font-weight: bold; padding: .3em 0; } .stack label { display: block; margin: .5em 0; }
        form.inline { display: inline-block; margin: .2em .6em .2em 0; } .message { background: #fff4c2; padding: .5em; }
        dl.facts { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; } dt { font-weight: bold; }
        button { cursor: pointer; } section { margin-bottom: 1.5em; }
        .charts svg { display: block; width: 660px; max-width: 100%; height: auto; margin: .8em 0; background: #fff; }
        """
}

/// HTML escaping by Unicode scalar, for every `{{value}}` of the console's pages and the overview's chart text.
/// swift-mustache's own escaping (and Foundation's `replacingOccurrences` on Linux) compares whole Characters, so a quote
/// followed by a combining mark (one Character, e.g. `"` U+0301) passed unescaped and could end an attribute.
struct ConsoleHTML: MustacheContentType {
    static let name = "CONSOLE_HTML"

    func escapeText(_ text: String) -> String { Self.escape(text) }

    static func escape(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out.append(contentsOf: "&amp;".unicodeScalars)
            case "<": out.append(contentsOf: "&lt;".unicodeScalars)
            case ">": out.append(contentsOf: "&gt;".unicodeScalars)
            case "\"": out.append(contentsOf: "&quot;".unicodeScalars)
            case "'": out.append(contentsOf: "&#39;".unicodeScalars)
            default: out.append(scalar)
            }
        }
        return String(out)
    }
}
