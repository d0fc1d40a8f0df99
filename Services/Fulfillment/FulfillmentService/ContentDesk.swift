import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import Receipts
import ServiceSupport

/// Content downloads: what an account's entitlements unlock, read in chunks or through a signed URL the edge serves.
public struct ContentDesk: FulfillmentPart {
    let service: FulfillmentService

    // MARK: content

    /// The scope whose entitlements unlock content: Sandbox ones (TestFlight, Xcode: free to buy) only with
    /// `--sandbox-content`, since one directory serves both and a signed URL is as good as the paid file.
    func contentScope(_ requested: AccountScope?) throws(RPCError) -> AccountScope {
        let scope = requested ?? .production
        guard scope == .production || configuration.sandboxContent else {
            throw RPCError.forbidden(
                "Sandbox purchases unlock no content on this server (development servers run with --sandbox-content)",
                reason: .sandboxContentDisabled)
        }
        return scope
    }

    public func listContent(_ p: ScopedSessionParams) async throws(RPCError) -> FulfillmentListContent.Result {
        let scope = try contentScope(p.environment)
        let account = try await dependencies.authenticate(p.session)
        var items: [ContentItem] = []
        for (contentId, productId) in try await entitledContent(accountId: account.accountId, scope: scope) {
            guard let info = try await service.content.info(contentId) else {
                logger.warning("entitled content is not installed", metadata: ["contentId": "\(contentId)"])
                continue
            }
            items.append(ContentItem(contentId: contentId, productId: productId, size: info.size, sha256: info.sha256))
        }
        return .init(content: items)
    }

    public func readContent(_ p: FulfillmentReadContent.Params) async throws(RPCError) -> FulfillmentReadContent.Result {
        guard p.offset >= 0 else { throw RPCError.invalidParams("offset must not be negative", field: "offset", reason: "invalidValue") }
        guard (1...configuration.maxContentChunk).contains(p.length) else {
            throw RPCError.invalidParams("length must be 1-\(configuration.maxContentChunk)", field: "length", reason: "invalidValue")
        }
        let scope = try contentScope(p.environment)
        let account = try await dependencies.authenticate(p.session)
        guard
            try await entitledContent(accountId: account.accountId, scope: scope)
                .contains(where: { $0.contentId == p.contentId })
        else {
            // The same answer whether the content exists or not: no probing of what others bought.
            throw RPCError.forbidden("this account is not entitled to content \(p.contentId)", reason: "notEntitled")
        }
        let chunk = try await service.content.read(p.contentId, offset: p.offset, length: p.length)
        // Any chunk counts (a client that skips the first byte has still downloaded the file); written once, read after.
        let accountId = account.accountId
        let known = try await storeCall { try await self.store.deliveredContent(accountId: accountId, scope: scope) }
        if !known.contains(p.contentId) { try await recordDelivery(accountId, scope, p.contentId) }
        return chunk
    }

    /// A signed URL the edge serves the file at, for an account entitled to it now. A refunded or expired
    /// entitlement gets none; one already issued is good until `expiresAtMs` (minutes), never longer.
    public func contentURL(_ p: FulfillmentContentURL.Params) async throws(RPCError) -> FulfillmentContentURL.Result {
        guard let signer = configuration.contentURLSigner else {
            throw RPCError.unavailable(
                "content URLs are not configured on this server (IAP_CONTENT_URL_KEY); use fulfillment.readContent",
                reason: "contentURLsDisabled")
        }
        let scope = try contentScope(p.environment)
        let account = try await dependencies.authenticate(p.session)
        guard
            try await entitledContent(accountId: account.accountId, scope: scope).contains(where: { $0.contentId == p.contentId })
        else {
            throw RPCError.forbidden("this account is not entitled to content \(p.contentId)", reason: "notEntitled")
        }
        guard let installed = try await service.content.info(p.contentId) else {
            throw RPCError.notFound("content \(p.contentId) is not installed on this server", reason: "contentMissing")
        }
        try await recordDelivery(account.accountId, scope, p.contentId)
        let expires = clock.nowMs + configuration.contentURLLifetimeMs
        let path = signer.path(
            for: .init(contentId: p.contentId, accountId: account.accountId, scope: scope.rawValue, expiresAtMs: expires))
        let base = configuration.contentURLBase.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } ?? ""
        return .init(url: base + path, expiresAtMs: expires, size: installed.size, sha256: installed.sha256)
    }

    /// A download given (a signed URL issued, or any chunk read) is what a consumption answer counts as delivered.
    private func recordDelivery(_ accountId: String, _ scope: AccountScope, _ contentId: String) async throws(RPCError) {
        let now = clock.nowMs
        try await storeCall { try await self.store.recordContentDelivery(accountId: accountId, scope: scope, contentId: contentId, nowMs: now) }
    }

    /// (contentId, productId) for every content id granted by the account's active entitlements,
    /// as the catalog defines the products now.
    func entitledContent(accountId: String, scope: AccountScope) async throws(RPCError) -> [(contentId: String, productId: String)] {
        let entitlements = try await storeCall {
            try await self.store.entitlements(accountId: accountId, scope: scope, nowMs: self.clock.nowMs).entitlements
        }
        let productIds = Array(Set(entitlements.map(\.productId))).sorted()
        guard !productIds.isEmpty else { return [] }
        let products = try await dependencies.products(productIds).products
        var out: [(String, String)] = []
        for product in products {
            if case .content(_, let ids) = product.grant { out += ids.map { ($0, product.productId) } }
        }
        return out
    }
}
