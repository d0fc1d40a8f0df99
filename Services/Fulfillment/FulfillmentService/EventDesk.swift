import Foundation
import IAPProtocol
import JSONRPC
import ServiceSupport

/// The event feed (`fulfillment.listEvents`) and the operators' webhook endpoints (add, rotate, list, pause, delete,
/// redeliver, deliveries). Deliveries themselves are `WebhookWorker`'s.
public struct EventDesk: FulfillmentPart {
    let service: FulfillmentService

    static let environments: Set<String> = ["Production", "Sandbox", "Xcode"]

    public func listEvents(_ p: FulfillmentListEvents.Params) async throws(RPCError) -> FulfillmentListEvents.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let after = try Self.position(p.after ?? "0", field: "after")
        let limit = p.limit ?? 100
        guard (1...1000).contains(limit) else { throw RPCError.invalidParams("limit must be 1-1000", field: "limit", reason: "invalidValue") }
        try Self.checkTypes(p.types)
        if let accountId = p.accountId, accountId.isEmpty || accountId.utf8.count > 200 {
            throw RPCError.invalidParams("accountId must be 1-200 bytes", field: "accountId", reason: "invalidValue")
        }
        let events = try await storeCall { try await self.store.events(after: after, limit: limit, accountId: p.accountId, types: p.types) }
        return .init(events: events, next: events.last?.cursor ?? after.cursor)
    }

    public func addWebhook(_ p: FulfillmentAddWebhook.Params) async throws(RPCError) -> FulfillmentAddWebhook.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        guard let url = WebhookURL(p.url) else {
            throw RPCError.invalidParams("url must be an http(s) URL with a host and no credentials", field: "url", reason: "invalidValue")
        }
        if let environments = p.environments, environments.isEmpty || !Set(environments).isSubset(of: Self.environments) {
            throw RPCError.invalidParams("environments are Production, Sandbox and Xcode", field: "environments", reason: "invalidValue")
        }
        try Self.checkTypes(p.types)
        let allowPrivate = p.allowPrivateAddress ?? false
        do {
            _ = try await WebhookSender.resolve(url, allowPrivate: allowPrivate)
        } catch let error as WebhookSendError {
            throw RPCError.invalidParams(error.description, field: "url", reason: "addressNotAllowed")
        } catch {
            throw RPCError.invalidParams("\(url.host) does not resolve: \(error)", field: "url", reason: "hostNotFound")
        }
        let most = configuration.webhooks.maxEndpoints
        let tooMany = RPCError.conflict("at most \(most) webhook endpoints", reason: "tooManyWebhooks")
        let id = "wh-" + Self.randomHex(12)
        let record = WebhookRecord(
            id: id, url: p.url, types: p.types, environments: p.environments, allowPrivateAddress: allowPrivate,
            secret: WebhookSender.newSecret(), state: "active", createdAtMs: clock.nowMs, dispatched: .start)
        // Only the scheme and host: a URL's path may itself be a secret (a capability URL), and the audit log is forever.
        let origin = (URLComponents(string: p.url)?.scheme ?? "") + "://" + url.host
        // The insert counts the endpoints itself; the audit follows it, so a refused add leaves no entry.
        guard try await storeCall({ try await self.store.addWebhook(record, maxEndpoints: most) }) else { throw tooMany }
        try await service.support.audit("addWebhook", transactionId: id, reason: origin, token: p.adminToken)
        service.webhookWakeup.signal()
        return .init(id: id, secret: record.secret)
    }

    public func rotateWebhookSecret(_ p: WebhookParams) async throws(RPCError) -> FulfillmentRotateWebhookSecret.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        _ = try await endpoint(p.id)
        let secret = WebhookSender.newSecret(), until = clock.nowMs + configuration.webhooks.rotationOverlapMs
        try await service.support.audit("rotateWebhookSecret", transactionId: p.id, reason: "new secret", token: p.adminToken)
        guard try await storeCall({ try await self.store.rotateWebhookSecret(p.id, secret: secret, previousUntilMs: until) }) else {
            throw Self.notFound(p.id)
        }
        return .init(secret: secret, previousSecretValidUntilMs: until)
    }

    public func listWebhooks(_ p: FulfillmentListWebhooks.Params) async throws(RPCError) -> FulfillmentListWebhooks.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        var out: [WebhookEndpoint] = []
        for w in try await storeCall({ try await self.store.webhooks() }) { out.append(try await describe(w)) }
        return .init(webhooks: out)
    }

    public func pauseWebhook(_ p: FulfillmentPauseWebhook.Params) async throws(RPCError) -> WebhookEndpoint {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        _ = try await endpoint(p.id)
        let paused = p.paused ?? true, now = clock.nowMs
        try await service.support.audit(paused ? "pauseWebhook" : "resumeWebhook", transactionId: p.id, reason: "", token: p.adminToken)
        let lease = configuration.webhooks.leaseMs
        _ = try await storeCall { try await self.store.setWebhookState(p.id, paused ? "paused" : "active", nowMs: now, leaseMs: lease) }
        if !paused { service.webhookWakeup.signal() }
        return try await describe(try await endpoint(p.id))
    }

    public func deleteWebhook(_ p: WebhookParams) async throws(RPCError) -> EmptyResult {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        _ = try await endpoint(p.id)
        try await service.support.audit("deleteWebhook", transactionId: p.id, reason: "", token: p.adminToken)
        _ = try await storeCall { try await self.store.deleteWebhook(p.id) }
        service.webhookSender.forget(p.id)
        return EmptyResult()
    }

    public func redeliverWebhook(_ p: FulfillmentRedeliverWebhook.Params) async throws(RPCError) -> FulfillmentRedeliverWebhook.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let after = try Self.position(p.after, field: "after")
        _ = try await endpoint(p.id)
        try await service.support.audit("redeliverWebhook", transactionId: p.id, reason: "after \(after.cursor)", token: p.adminToken)
        let now = clock.nowMs, lease = configuration.webhooks.leaseMs
        let accounts = try await storeCall { try await self.store.redeliverWebhook(p.id, after: after, nowMs: now, leaseMs: lease) }
        service.webhookWakeup.signal()
        return .init(accounts: accounts)
    }

    public func listDeliveries(_ p: FulfillmentListDeliveries.Params) async throws(RPCError) -> FulfillmentListDeliveries.Result {
        try TokenGate.admin.check(p.adminToken, configured: configuration.adminToken)
        let limit = p.limit ?? 100
        guard (1...1000).contains(limit) else { throw RPCError.invalidParams("limit must be 1-1000", field: "limit", reason: "invalidValue") }
        _ = try await endpoint(p.id)
        return .init(deliveries: try await storeCall { try await self.store.webhookDeliveries(p.id, limit: limit) })
    }

    private func endpoint(_ id: String) async throws(RPCError) -> WebhookRecord {
        guard let w = try await storeCall({ try await self.store.webhook(id) }) else { throw Self.notFound(id) }
        return w
    }

    private func describe(_ w: WebhookRecord) async throws(RPCError) -> WebhookEndpoint {
        let backlog = try await storeCall { try await self.store.webhookBacklog(w.id) }
        return WebhookEndpoint(
            id: w.id, url: w.url, types: w.types, environments: w.environments, allowPrivateAddress: w.allowPrivateAddress, state: w.state,
            createdAtMs: w.createdAtMs, previousSecretValidUntilMs: w.signingSecrets(nowMs: clock.nowMs).count > 1 ? w.previousSecretUntilMs : nil,
            backlog: backlog.count, oldestWaitingSinceMs: backlog.oldestMs, lastError: backlog.lastError)
    }

    static func checkTypes(_ types: [FulfillmentEventType]?) throws(RPCError) {
        guard let types else { return }
        guard !types.isEmpty, types.count == Set(types).count else {
            throw RPCError.invalidParams("types, when given, names each type once", field: "types", reason: "invalidValue")
        }
    }

    static func notFound(_ id: String) -> RPCError { .notFound("no webhook endpoint \(id)", reason: "webhookNotFound") }

    static func position(_ cursor: String, field: String) throws(RPCError) -> EventPosition {
        guard let position = EventPosition(cursor: cursor) else {
            throw RPCError.invalidParams("\(field) is a cursor from an earlier answer (or 0)", field: field, reason: "invalidValue")
        }
        return position
    }

    static func randomHex(_ bytes: Int) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }
}
