import IAPProtocol
import JSONRPC
import ServiceSupport

/// A subscription's retention rules (Apple's Retention Messaging): set by an admin, read by fulfillment.
extension CatalogService {
    /// Replaces a subscription's retention rules, keeping the rest of its definition, its status and its prices. An
    /// alternate product must be another auto-renewable of the catalog.
    public func setRetention(_ p: CatalogSetRetention.Params) async throws(RPCError) {
        try checkAdmin(p.adminToken)
        try ProductValidation.checkProductId(p.productId, field: "productId")
        let snapshot = try await currentSnapshot()
        guard let entry = snapshot.products.first(where: { $0.definition.productId == p.productId }) else {
            throw RPCError.notFound("no product \(p.productId)", reason: "unknownProduct")
        }
        if let rules = p.retention {
            try RetentionValidation.check(rules, product: entry.definition, field: "retention")  // again below, on the stored offers
            // Apple offers an alternate product of the same subscription group only.
            let group = Self.subscriptionGroup(entry.definition)
            for (i, choice) in rules.choices.enumerated() {
                guard let other = choice.alternateProductId else { continue }
                guard let alternate = snapshot.products.first(where: { $0.definition.productId == other }),
                    alternate.definition.type == .autoRenewable, Self.subscriptionGroup(alternate.definition) == group
                else {
                    throw RPCError.invalidParams(
                        "\(other) is not an auto-renewable subscription of the catalog in the same subscription group",
                        field: "retention.choices[\(i)].alternateProductId", reason: "unknownProduct")
                }
                guard alternate.status == .active else {
                    throw RPCError.invalidParams(
                        "\(other) is retired: it is no longer sold, so it cannot be offered instead",
                        field: "retention.choices[\(i)].alternateProductId", reason: "productRetired")
                }
            }
        }
        let rules = p.retention
        let change = try await write {
            try await self.store.amend(productId: p.productId) { definition throws(RPCError) in
                if let rules { try RetentionValidation.check(rules, product: definition, field: "retention") }
                definition.retention = rules
            }
        }
        guard change == .done else { throw RPCError.notFound("no product \(p.productId)", reason: "unknownProduct") }
        logger.info("retention rules set", metadata: ["productId": "\(p.productId)", "choices": "\(p.retention?.choices.count ?? 0)"])
    }

    static func subscriptionGroup(_ d: ProductDefinition) -> String? {
        if case .subscription(_, let group) = d.grant { return group }
        return nil
    }

    /// The rules, offers and group of a subscription (retired ones included: their subscribers still cancel).
    public func getRetention(_ p: CatalogGetRetention.Params) async throws(RPCError) -> CatalogGetRetention.Result {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        try ProductValidation.checkProductId(p.productId, field: "productId")
        let snapshot = try await currentSnapshot()
        guard let entry = snapshot.products.first(where: { $0.definition.productId == p.productId }),
            case .subscription(_, let group) = entry.definition.grant
        else {
            throw RPCError.notFound("\(p.productId) is not an auto-renewable subscription in the catalog", reason: "unknownProduct")
        }
        // An alternate retired since the rules were set is no longer sold: its choice is left out (kept in the rules, so it
        // comes back if the product does).
        var retention = entry.definition.retention
        retention?.choices.removeAll { choice in
            guard let other = choice.alternateProductId else { return false }
            return snapshot.products.first(where: { $0.definition.productId == other })?.status != .active
        }
        return .init(productId: p.productId, subscriptionGroup: group, retention: retention, offers: entry.definition.offers)
    }
}
